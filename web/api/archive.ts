import { gzipSync } from "node:zlib";
import { pack } from "tar-stream";

/** Files into one .tar.gz, each under `root/`. */
export async function tarGz(root: string, files: { path: string; content: string }[]): Promise<Buffer> {
  const p = pack();
  const chunks: Buffer[] = [];
  p.on("data", (c) => chunks.push(c as Buffer));
  const done = new Promise<void>((res, rej) => {
    p.on("end", () => res());
    p.on("error", rej);
  });
  const mtime = new Date();
  for (const f of files) p.entry({ name: `${root}/${f.path}`, mode: 0o600, mtime }, f.content);
  p.finalize();
  await done;
  return gzipSync(Buffer.concat(chunks));
}

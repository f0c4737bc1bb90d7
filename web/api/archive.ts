import { gzipSync } from "node:zlib";
import { pack } from "tar-stream";
import { type Diagnosis, firstHostsOf } from "../../shared/fleet/ops.ts";

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

/**
 * At most this many bytes of .tar.gz in one diagnose answer: under the 6 MB a Lambda Function URL returns, with
 * room for the response's headers.
 */
export const DIAGNOSE_ARCHIVE_MAX_BYTES = 5 * 1024 * 1024;

/**
 * A diagnose part as one .tar.gz that fits DIAGNOSE_ARCHIVE_MAX_BYTES: when what was collected does not compress
 * enough, the last hosts are left for the next part (`next`) and the archive is made again.
 */
export async function diagnoseArchive(
  d: Diagnosis & { next?: string },
): Promise<{ name: string; archive: Buffer; next?: string }> {
  let part = d;
  let archive = await tarGz(part.name, part.files);
  while (archive.length > DIAGNOSE_ARCHIVE_MAX_BYTES && part.index.hosts.length > 1) {
    // Leave out hosts in proportion to how much too large it is (at least one), then measure again.
    const keep = Math.min(
      part.index.hosts.length - 1,
      Math.floor((part.index.hosts.length * DIAGNOSE_ARCHIVE_MAX_BYTES) / archive.length),
    );
    part = firstHostsOf(part, keep);
    archive = await tarGz(part.name, part.files);
  }
  return { name: part.name, archive, ...(part.next ? { next: part.next } : {}) };
}

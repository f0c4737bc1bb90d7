import { execFile } from "node:child_process";
import { VisibleError } from "../runtime/errors.ts";
import type { Workshop } from "../workshop/schema.ts";

const SHA = /^[0-9a-f]{7,40}$/i;

/**
 * An invalid ref fails before any host is touched: branches and tags are looked up with `git ls-remote`
 * from the control plane. A commit id cannot be checked without fetching; each host's reset checks it.
 */
export async function checkRef(spec: Workshop, ref: string | undefined): Promise<void> {
  if (!ref) return;
  if (!spec.lab.source.startsWith("git:")) {
    throw new VisibleError("input", "deploy.ref_without_git", 'a ref applies only to a "git:" lab source', [
      { path: "ref", message: 'expected no ref: lab.source is not "git:"' },
    ]);
  }
  if (SHA.test(ref)) return;
  const url = spec.lab.source.slice(4);
  const found = await new Promise<boolean>((resolve, reject) => {
    execFile(
      "git",
      ["ls-remote", "--exit-code", "--", url, `refs/heads/${ref}`, `refs/tags/${ref}`],
      { timeout: 30_000, env: { ...process.env, GIT_TERMINAL_PROMPT: "0" } },
      (err) => {
        if (!err) return resolve(true);
        const code = (err as { code?: unknown }).code;
        if (code === 2) return resolve(false); // --exit-code: the repository answered, the ref is not there
        reject(
          new VisibleError(
            "input",
            "deploy.source_unreachable",
            `cannot read the lab's git source to check ref ${ref}`,
          ),
        );
      },
    );
  });
  if (!found) {
    throw new VisibleError(
      "input",
      "deploy.unknown_ref",
      `ref ${ref} is neither a branch nor a tag of the lab source`,
      [{ path: "ref", message: `expected a branch, tag or commit of ${url.replace(/\/\/[^@/]*@/, "//")}` }],
    );
  }
}

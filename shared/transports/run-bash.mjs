// One command of a local sandbox host, run by bash: the one way both the runtime (shared/transports/local.ts)
// and its spawner helpers (spawner-child.mjs) start it. Plain JavaScript, so the helpers start without a loader;
// its types are in run-bash.d.mts.
import { spawn } from "node:child_process";

/** Keeps the first `cap` bytes a stream writes; the rest is counted as truncated and dropped. */
export function collectBytes(stream, cap) {
  const chunks = [];
  let size = 0;
  let truncated = false;
  stream.on("data", (chunk) => {
    if (size >= cap) {
      truncated = true;
      return;
    }
    const room = cap - size;
    chunks.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
    size += Math.min(chunk.length, room);
    if (chunk.length > room) truncated = true;
  });
  return {
    bytes: () => Buffer.concat(chunks),
    get truncated() {
      return truncated;
    },
  };
}

/**
 * Runs `req.command` with bash in `req.cwd`, in its own process group (detached), so a timeout kills all of it
 * (SIGKILL to the group after `req.timeoutMs`). Input: `req.stdin` (a string or bytes), or `input` (a stream
 * piped in), or none. Resolves once the command's streams close; rejects when it could not be started.
 */
export function runBash(req, input) {
  return new Promise((resolve, reject) => {
    let child;
    try {
      child = spawn("bash", ["--noprofile", "--norc", "-c", req.command], {
        cwd: req.cwd,
        detached: true,
        stdio: ["pipe", "pipe", "pipe"],
        env: req.env,
      });
    } catch (e) {
      reject(e);
      return;
    }
    const out = collectBytes(child.stdout, req.cap);
    const err = collectBytes(child.stderr, req.cap);
    let timedOut = false;
    const timer =
      req.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            try {
              if (child.pid) process.kill(-child.pid, "SIGKILL");
            } catch {
              // already gone
            }
          }, req.timeoutMs);
    child.on("error", (e) => {
      if (timer) clearTimeout(timer);
      reject(e);
    });
    child.on("close", (code, signal) => {
      if (timer) clearTimeout(timer);
      resolve({
        code,
        signal,
        timedOut,
        stdout: out.bytes(),
        stderr: err.bytes(),
        truncated: out.truncated || err.truncated,
      });
    });
    child.stdin.on("error", () => {}); // the command may exit without reading its input
    if (input) input.pipe(child.stdin);
    else if (req.stdin === undefined) child.stdin.end();
    else child.stdin.end(Buffer.from(req.stdin));
  });
}

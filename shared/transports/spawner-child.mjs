// The spawner's helper process (shared/transports/spawner.ts): it starts the commands of local hosts on the
// runtime's behalf. A fork copies the whole calling process, so a runtime holding hundreds of megabytes pays
// tens of milliseconds of its event loop per command; this process is small, so its forks are cheap. One
// message in per command, one message out with its result; plain JavaScript, so it starts without a loader.
import { runBash } from "./run-bash.mjs";

function run(req) {
  runBash(req).then(
    (r) => process.send({ id: req.id, ...r }),
    (e) => process.send({ id: req.id, error: String(e?.message ?? e) }),
  );
}

process.on("message", run);
// The runtime is gone: nothing is left to answer. Commands still running go on, as they would have had the
// runtime started them itself (each is detached in its own process group).
process.on("disconnect", () => process.exit(0));

import { shq } from "../transports/types.ts";

/**
 * The host side of an exec job: three short commands, the same over every transport (local, SSH, SSM, agent).
 * The job's command runs detached (`setsid -f`, all three streams redirected, so it outlives the connection that
 * started it) under execScript, in `~/.labfleet/exec/<jobId>/`:
 *
 * - `pid`: the wrapper's pid, which is also its session id (every process of the command is in that session);
 * - `out`, `err`: what execScript passes on (already cut to the transport's caps on the host, with its marker
 *   line at the end of `err`);
 * - `t0`, `t1`: start and end, epoch ms; `done`: written last, when the command has ended.
 *
 * A check (`pollScript`) answers at once: exit 3 while the command runs; exit 0 with `out` on stdout and
 * `@@labfleet-job ms=N` then `err` on stderr once it has ended (and the folder is removed); exit 4 when the host
 * has no record of the job, 5 when the wrapper died without an end. So over SSM each check's output stays
 * inside what GetCommandInvocation returns inline.
 */

const JOB_DIR = (jobId: string) => `"$HOME"/.labfleet/exec/${shq(jobId)}`;
const JOB_LINE = /^@@labfleet-job ms=(\d+)\n/;

export const POLL_RUNNING = 3;
export const POLL_UNKNOWN = 4;
export const POLL_GONE = 5;

/** Starts the script given on stdin detached; answers `started` (again, harmlessly, when it already was). */
export function startScript(jobId: string): string {
  return `d=${JOB_DIR(jobId)}
mkdir -p "$d" || exit 97
if [ -e "$d/pid" ]; then cat > /dev/null; echo started; exit 0; fi
cat > "$d/run.sh" || exit 97
cd "$HOME" || exit 97
setsid -f bash -c 'echo $$ > "$1/pid.new" && mv "$1/pid.new" "$1/pid"
date +%s%3N > "$1/t0"
bash "$1/run.sh" > "$1/out" 2> "$1/err" < /dev/null
date +%s%3N > "$1/t1"
: > "$1/done"' labfleet-exec "$d" > /dev/null 2>&1 < /dev/null
for _ in $(seq 100); do [ -e "$d/pid" ] && break; sleep 0.05; done
[ -e "$d/pid" ] || exit 98
echo started
`;
}

/** Checks the job on the host: see the exit codes above. */
export function pollScript(jobId: string): string {
  return `d=${JOB_DIR(jobId)}
ended() {
  printf '@@labfleet-job ms=%d\\n' "$(( $(cat "$d/t1" 2>/dev/null || echo 0) - $(cat "$d/t0" 2>/dev/null || echo 0) ))" >&2
  cat "$d/out" 2>/dev/null; cat "$d/err" >&2 2>/dev/null
  rm -rf "$d"; exit 0
}
[ -e "$d/done" ] && ended
[ -e "$d/pid" ] || exit ${POLL_UNKNOWN}
kill -0 "$(cat "$d/pid")" 2>/dev/null && exit ${POLL_RUNNING}
[ -e "$d/done" ] && ended
rm -rf "$d"; exit ${POLL_GONE}
`;
}

/** Ends the job's command on the host (TERM to its whole session, KILL 2 s later) and removes its folder. */
export function killScript(jobId: string): string {
  return `d=${JOB_DIR(jobId)}
if [ -e "$d/pid" ]; then
  p=$(cat "$d/pid")
  pkill -TERM -s "$p" 2>/dev/null || kill -TERM -- "-$p" 2>/dev/null
  for _ in $(seq 20); do pgrep -s "$p" > /dev/null 2>&1 || break; sleep 0.1; done
  # Again until none is left: a process forked while pkill read the process list escapes one round.
  for _ in $(seq 20); do
    pkill -KILL -s "$p" 2>/dev/null || kill -KILL -- "-$p" 2>/dev/null || break
    pgrep -s "$p" > /dev/null 2>&1 || break
    sleep 0.1
  done
fi
rm -rf "$d"; exit 0
`;
}

/** A finished check's answer: the command's own stdout and stderr (marker included) and its duration. */
export function parsePoll(stdout: string, stderr: string): { stdout: string; stderr: string; ms: number } {
  const m = JOB_LINE.exec(stderr);
  return m ? { stdout, stderr: stderr.slice(m[0].length), ms: Number(m[1]) } : { stdout, stderr, ms: 0 };
}

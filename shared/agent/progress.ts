import { z } from "zod";
import { accessText, HOST_PAGE_BYTES, PROBE_LIMITS, parseProbe } from "../fleet/lab.ts";
import { applyPushedReading, type LabReading } from "../fleet/up.ts";
import { assertActor } from "../runtime/actor.ts";
import { VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { issueDetails } from "../runtime/zod.ts";

/**
 * Progress a host pushes (`POST /agent/v1/progress`, signed by the host: shared/agent/signing.ts): what the lab's
 * wrapper (shared/fleet/lab.ts) sends on each phase change, on setup's exit, and with `lab.health`'s result. The
 * body carries what a poll would read on the host, so it is judged by the poll's own code (judgeHost in
 * shared/fleet/up.ts) and nothing else: the probe's output (base64), the health check's exit code and the tail
 * of its output, and the access file once health passed.
 */

const base64 = (what: string, maxBytes: number) =>
  z
    .string({ error: `expected ${what} as base64` })
    .max(Math.ceil(maxBytes / 3) * 4, { error: `expected at most ${maxBytes} bytes of ${what}` })
    .regex(/^[A-Za-z0-9+/]*={0,2}$/, { error: `expected ${what} as base64` });

/** The probe prints under 18 KB (PROBE_LIMITS); a pushed one may hold a little more before it is refused. */
const PROBE_MAX_BYTES = 2 * (PROBE_LIMITS.statusHeadBytes + PROBE_LIMITS.statusTailBytes) + HOST_PAGE_BYTES;
const ACCESS_PUSH_MAX_BYTES = 64 * 1024 + 1;

export const PushedProgress = z.strictObject({
  event: z.enum(["phase", "exit", "health"], { error: 'expected "phase", "exit" or "health"' }),
  probe: base64("the probe's output", PROBE_MAX_BYTES),
  health: z
    .strictObject({
      exitCode: z.number({ error: "expected an exit code" }).int({ error: "expected an exit code" }),
      output: base64("the health check's output", 3000).optional(),
    })
    .optional(),
  access: base64("the access file", ACCESS_PUSH_MAX_BYTES).optional(),
});
export type PushedProgress = z.infer<typeof PushedProgress>;

/** A pushed body as the reading judgeLab takes. */
export function pushedReading(body: PushedProgress): LabReading {
  const decode = (b64: string) => Buffer.from(b64, "base64");
  return {
    probe: async () => parseProbe(decode(body.probe).toString("utf8")),
    health: async () =>
      body.health && {
        exitCode: body.health.exitCode,
        stdout: "",
        stderr: body.health.output ? decode(body.health.output).toString("utf8") : "",
      },
    access: async () => (body.access === undefined ? undefined : accessText(decode(body.access))),
  };
}

/** Parses a pushed body: 400 with each field's path and what was expected. */
export function parsePushedProgress(text: string): PushedProgress {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new VisibleError("input", "input.bad_json", "the request body is not valid JSON");
  }
  const parsed = PushedProgress.safeParse(json);
  if (!parsed.success) {
    const details = issueDetails(parsed.error.issues);
    throw new VisibleError(
      "input",
      "progress.invalid",
      `the pushed progress is not valid: ${details.map((d) => `${d.path}: ${d.message}`).join("; ")}`,
      details,
    );
  }
  return parsed.data;
}

/**
 * Applies a host's pushed progress to its own record (the signing host: the actor, never the body, names it),
 * as a poll would (applyPushedReading). A probe that came back cut is refused (400 `progress.unreadable`) and
 * changes nothing: the next push or poll reads it again.
 */
export async function receiveProgress(body: PushedProgress): Promise<{ state: string; applied: boolean }> {
  const actor = assertActor("host");
  if (actor.type !== "host") throw new Error("unreachable");
  try {
    const r = await applyPushedReading(actor.workshop, actor.hostId, () => pushedReading(body));
    log.debug("progress pushed", { workshop: actor.workshop, hostId: actor.hostId, event: body.event, ...r });
    return r;
  } catch (err) {
    if (err instanceof VisibleError) throw err;
    if ((err as Error).name === "ProbeCutError")
      throw new VisibleError("input", "progress.unreadable", (err as Error).message);
    throw err;
  }
}

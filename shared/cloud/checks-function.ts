import { InvokeCommand, type InvokeCommandOutput, type LambdaClient } from "@aws-sdk/client-lambda";
import { z } from "zod";
import type { CheckOutcome } from "../fleet/lab-checks.ts";
import type { Deps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";

const Outcomes = z.array(
  z.object({
    name: z.string(),
    passed: z.boolean(),
    timedOut: z.boolean(),
    exitCode: z.number(),
    output: z.string(),
  }),
);

const failed = () =>
  new VisibleError(
    "host",
    "checks.host_failed",
    "Checking your work did not work. Try again in a minute, or ask your instructor.",
  );

/**
 * The cloud portal's way to run a lab's checks: a synchronous Invoke of the RunChecks function (by its fixed
 * name), which reaches the host and returns the outcomes, redacted. The portal's function holds no host
 * permission; it may only invoke that one function (infra/permissions.ts, invokeChecks), with a workshop and a
 * lab, so what runs on a host is only ever what workshop.yaml says.
 */
export function checksFunction(client: LambdaClient, functionName: string): NonNullable<Deps["checks"]> {
  return {
    async run(workshop: string, hostId: string): Promise<CheckOutcome[]> {
      let out: InvokeCommandOutput;
      try {
        out = await client.send(
          new InvokeCommand({
            FunctionName: functionName,
            Payload: Buffer.from(JSON.stringify({ workshop, hostId })),
          }),
        );
      } catch (err) {
        log.warn("invoking RunChecks failed", { workshop, lab: hostId, error: errorMessage(err) });
        throw failed();
      }
      const text = Buffer.from(out.Payload ?? new Uint8Array()).toString("utf8");
      if (out.FunctionError) {
        // A VisibleError's message is safe to show (it names no secret); anything else is logged, not shown.
        let e: { errorType?: unknown; errorMessage?: unknown } = {};
        try {
          e = JSON.parse(text);
        } catch {
          // not JSON
        }
        if (e.errorType === "VisibleError" && typeof e.errorMessage === "string")
          throw new VisibleError("host", "checks.host_failed", e.errorMessage);
        log.warn("RunChecks failed", { workshop, lab: hostId, errorType: String(e.errorType ?? "unknown") });
        throw failed();
      }
      const parsed = Outcomes.safeParse(JSON.parse(text || "null"));
      if (!parsed.success) throw failed();
      return parsed.data;
    },
  };
}

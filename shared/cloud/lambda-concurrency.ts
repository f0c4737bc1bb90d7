import { GetAccountSettingsCommand, type LambdaClient } from "@aws-sdk/client-lambda";
import { errorMessage } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";

/**
 * How many Lambda invocations the account can run at once and has not reserved for particular functions
 * (GetAccountSettings' `AccountLimit.UnreservedConcurrentExecutions`). A new account may have 10, not 1,000:
 * a run that deployed more hosts at once than that would be throttled (Lambda.TooManyRequestsException).
 * Needs lambda:GetAccountSettings. Undefined when Lambda does not say (the run is then not bounded by it).
 */
export function lambdaConcurrency(client: LambdaClient): () => Promise<number | undefined> {
  return async () => {
    try {
      const out = await client.send(new GetAccountSettingsCommand({}));
      const n = out.AccountLimit?.UnreservedConcurrentExecutions ?? out.AccountLimit?.ConcurrentExecutions;
      return typeof n === "number" && n > 0 ? n : undefined;
    } catch (err) {
      log.warn(
        "reading the account's Lambda concurrency failed; the run's concurrency is not bounded by it",
        {
          error: errorMessage(err),
        },
      );
      return undefined;
    }
  };
}

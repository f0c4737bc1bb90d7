import { z } from "zod";
import { failTeardown } from "../shared/fleet/teardown.ts";
import { CaughtError, causeMessage, RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "fail-teardown",
  z.object({ workshop: WorkshopName, runId: RunId, error: CaughtError }),
  async (i) => {
    await failTeardown(i.workshop, i.runId, causeMessage(i.error));
    return { state: "failed" as const };
  },
);

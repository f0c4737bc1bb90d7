import { z } from "zod";
import { failRun } from "../shared/fleet/up.ts";
import { CaughtError, causeMessage, RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "fail-run",
  z.object({ workshop: WorkshopName, runId: RunId, error: CaughtError }),
  async (i) => {
    await failRun(i.workshop, i.runId, causeMessage(i.error));
    return { state: "failed" as const };
  },
);

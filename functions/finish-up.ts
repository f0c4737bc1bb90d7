import { z } from "zod";
import { finishUp } from "../shared/fleet/up.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler("finish-up", z.object({ workshop: WorkshopName, runId: RunId }), (i) =>
  finishUp(i.workshop, i.runId),
);

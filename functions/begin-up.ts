import { z } from "zod";
import { beginUp } from "../shared/fleet/up.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler("begin-up", z.object({ workshop: WorkshopName, runId: RunId }), (i) =>
  beginUp(i.workshop, i.runId),
);

import { z } from "zod";
import { pollFleet } from "../shared/fleet/up.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "poll",
  z.object({ workshop: WorkshopName, runId: RunId, deadline: z.iso.datetime() }),
  (i) => pollFleet(i.workshop, i.runId, i.deadline),
);

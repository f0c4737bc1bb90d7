import { z } from "zod";
import { failUnfinished } from "../shared/fleet/up.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "fail-unfinished",
  z.object({ workshop: WorkshopName, runId: RunId, deadline: z.iso.datetime() }),
  (i) => failUnfinished(i.workshop, i.runId, i.deadline),
);

import { z } from "zod";
import { failUnfinished } from "../shared/fleet/up.ts";
import { taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "fail-unfinished",
  z.object({ workshop: WorkshopName, deadline: z.iso.datetime() }),
  (i) => failUnfinished(i.workshop, i.deadline),
);

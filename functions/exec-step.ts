import { z } from "zod";
import { stepExecJob } from "../shared/fleet/exec-jobs.ts";
import { taskHandler, WorkshopName } from "../shared/runtime/handler.ts";
import { idSchema } from "../shared/runtime/ids.ts";

export const handler = taskHandler(
  "exec-step",
  z.object({ workshop: WorkshopName, jobId: idSchema("exec") }),
  (i) => stepExecJob(i.workshop, i.jobId),
);

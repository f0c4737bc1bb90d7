import { z } from "zod";
import { failExecJob } from "../shared/fleet/exec-jobs.ts";
import { CaughtError, causeMessage, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";
import { idSchema } from "../shared/runtime/ids.ts";

export const handler = taskHandler(
  "exec-fail",
  z.object({ workshop: WorkshopName, jobId: idSchema("exec"), error: CaughtError }),
  async (i) => {
    await failExecJob(i.workshop, i.jobId, causeMessage(i.error));
    return { state: "failed" as const };
  },
);

import { z } from "zod";
import { finishTeardown } from "../shared/fleet/teardown.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

const Result = z.object({
  hostId: z.string(),
  result: z.enum(["destroyed", "skipped", "error"]),
  detail: z.string().optional(),
});

export const handler = taskHandler(
  "finish-teardown",
  z.object({ workshop: WorkshopName, runId: RunId, results: z.array(Result) }),
  (i) => finishTeardown(i.workshop, i.runId, i.results),
);

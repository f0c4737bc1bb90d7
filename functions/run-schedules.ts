import { z } from "zod";
import { runDueSchedules } from "../shared/fleet/schedules.ts";
import { taskHandler } from "../shared/runtime/handler.ts";

/** Fires every due TTL schedule: the local scheduler's tick, and in the cloud the sweeper's target. */
export const handler = taskHandler("run-schedules", z.unknown(), async () => ({
  fired: await runDueSchedules(),
}));

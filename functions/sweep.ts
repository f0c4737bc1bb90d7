import { z } from "zod";
import { SCHEDULE_SOURCE } from "../shared/cloud/scheduler.ts";
import { fireScheduleOf } from "../shared/fleet/schedules.ts";
import { sweep } from "../shared/fleet/sweeper.ts";
import { taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

/** What a workshop's EventBridge one-time schedule sends (eventbridge-schedules.ts, scheduleInput). */
const ScheduledTeardown = z.object({
  source: z.literal(SCHEDULE_SOURCE),
  kind: z.literal("teardown"),
  workshop: WorkshopName,
});

/**
 * The sweeper Lambda. Two callers: the rate(5 minutes) cron (any other event) runs the whole pass; a workshop's
 * one-time TTL schedule fires that workshop's schedule record, which decides whether it is still due.
 */
export const handler = taskHandler("sweep", z.unknown(), async (event) => {
  const scheduled = ScheduledTeardown.safeParse(event);
  if (scheduled.success) return { schedule: await fireScheduleOf(scheduled.data.workshop) };
  return sweep();
});

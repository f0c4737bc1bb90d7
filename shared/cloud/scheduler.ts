import { createHash } from "node:crypto";
import {
  CreateScheduleCommand,
  type CreateScheduleCommandInput,
  DeleteScheduleCommand,
  ListSchedulesCommand,
  type SchedulerClient,
  UpdateScheduleCommand,
} from "@aws-sdk/client-scheduler";
import type { Leftover } from "../providers/types.ts";
import type { ScheduleMirror } from "../runtime/deps.ts";
import { log } from "../runtime/logger.ts";

/**
 * The cloud's copy of the TTL teardown schedules: one EventBridge Scheduler one-time schedule per workshop.
 *
 * What it targets, and why: the schedule invokes the **sweep Lambda** (functions/sweep.ts) with the input
 * `{"source": "labfleet.schedule", "kind": "teardown", "workshop": NAME}`, which fires that workshop's schedule
 * record through `fireScheduleOf` (schedules.ts). It does not start the teardown state machine directly: a bare
 * StartExecution would skip `startRun`, so there would be no run record (FinishTeardown needs a run id), no
 * one-run-per-workshop claim, no stop of a running `up`, and no `pending -> fired` conditional write. Going through
 * the record keeps it the source of truth: a schedule that fires after `labfleet extend` moved the record (its
 * UpdateSchedule failed) or after a teardown cancelled it finds the record not due, or not pending, and does
 * nothing; one that never fires is caught by the sweeper's rate(5 minutes) pass over the due records.
 *
 * Calls (the role running this needs scheduler:CreateSchedule, UpdateSchedule and DeleteSchedule on the group's
 * schedules, and iam:PassRole on `roleArn`; `roleArn` must allow scheduler.amazonaws.com to invoke `targetArn`):
 * - put: CreateSchedule; ConflictException (it exists) -> UpdateSchedule with the same full definition.
 * - remove: DeleteSchedule; ResourceNotFoundException (fired and deleted itself, or never made) is fine.
 * - leftover: ListSchedules of the group with the name as NamePrefix (scheduler:ListSchedules, which takes no
 *   resource), every page; schedules carry no tags, so the stage's group and the name are their ownership.
 * Each schedule is `at(yyyy-mm-ddThh:mm:ss)` in UTC, FlexibleTimeWindow OFF, ActionAfterCompletion DELETE.
 */
export interface EventBridgeScheduleMirrorOptions {
  client: SchedulerClient;
  /** The schedule group (one per deployment stage, so two stages never share a name). */
  group: string;
  /** The function the schedule invokes: the sweep Lambda (functions/sweep.ts). */
  targetArn: string;
  /** The role EventBridge Scheduler assumes to invoke the target. */
  roleArn: string;
  clock?: { now(): Date };
}

export const SCHEDULE_SOURCE = "labfleet.schedule";
const NAME_PREFIX = "labfleet-teardown-";
const MAX_NAME = 64;
/** A schedule's time must lie ahead when it is created: a past `at` never fires. */
const MIN_LEAD_MS = 60_000;

/**
 * The schedule's name: `labfleet-teardown-<workshop>`, stable for a workshop. A workshop name that is not a valid
 * Scheduler name (letters, digits, `-`, `_`, `.`; at most 64 characters) gets its invalid characters replaced and
 * a hash of the real name appended, so two workshops never share a schedule.
 */
export function scheduleName(workshop: string): string {
  const safe = workshop.replace(/[^0-9A-Za-z_.-]/g, "-");
  if (safe === workshop && NAME_PREFIX.length + safe.length <= MAX_NAME) return `${NAME_PREFIX}${safe}`;
  const hash = createHash("sha256").update(workshop).digest("hex").slice(0, 10);
  return `${NAME_PREFIX}${safe.slice(0, MAX_NAME - NAME_PREFIX.length - hash.length - 1)}-${hash}`;
}

/**
 * `at(yyyy-mm-ddThh:mm:ss)` for a time, in UTC, rounded up to the whole second so the record is due when the
 * schedule fires, and at least a minute ahead of now.
 */
export function atExpression(at: Date, now: Date): string {
  const ms = Math.max(at.getTime(), now.getTime() + MIN_LEAD_MS);
  const iso = new Date(Math.ceil(ms / 1000) * 1000).toISOString();
  return `at(${iso.slice(0, 19)})`;
}

/** The input the target receives: what functions/sweep.ts reads to fire one workshop's schedule. */
export function scheduleInput(workshop: string): string {
  return JSON.stringify({ source: SCHEDULE_SOURCE, kind: "teardown", workshop });
}

function errorName(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "name" in err ? String(err.name) : undefined;
}

export class EventBridgeScheduleMirror implements ScheduleMirror {
  private readonly opts: EventBridgeScheduleMirrorOptions;
  private readonly clock: { now(): Date };

  constructor(opts: EventBridgeScheduleMirrorOptions) {
    this.opts = opts;
    this.clock = opts.clock ?? { now: () => new Date() };
  }

  definition(workshop: string, at: Date): CreateScheduleCommandInput {
    return {
      Name: scheduleName(workshop),
      GroupName: this.opts.group,
      ScheduleExpression: atExpression(at, this.clock.now()),
      ScheduleExpressionTimezone: "UTC",
      Description: `labfleet: tear down workshop ${workshop} at its TTL`,
      State: "ENABLED",
      FlexibleTimeWindow: { Mode: "OFF" },
      ActionAfterCompletion: "DELETE",
      Target: { Arn: this.opts.targetArn, RoleArn: this.opts.roleArn, Input: scheduleInput(workshop) },
    };
  }

  async put(workshop: string, at: Date): Promise<void> {
    const input = this.definition(workshop, at);
    try {
      await this.opts.client.send(new CreateScheduleCommand(input));
      log.info("teardown schedule created", { workshop, schedule: input.Name, at: input.ScheduleExpression });
    } catch (err) {
      if (errorName(err) !== "ConflictException") throw err;
      await this.opts.client.send(new UpdateScheduleCommand(input));
      log.info("teardown schedule moved", { workshop, schedule: input.Name, at: input.ScheduleExpression });
    }
  }

  async remove(workshop: string): Promise<void> {
    const Name = scheduleName(workshop);
    try {
      await this.opts.client.send(new DeleteScheduleCommand({ Name, GroupName: this.opts.group }));
      log.info("teardown schedule deleted", { workshop, schedule: Name });
    } catch (err) {
      if (errorName(err) !== "ResourceNotFoundException") throw err;
    }
  }

  async leftover(workshop: string): Promise<Leftover | undefined> {
    const Name = scheduleName(workshop);
    let NextToken: string | undefined;
    do {
      const page = await this.opts.client.send(
        new ListSchedulesCommand({
          GroupName: this.opts.group,
          NamePrefix: Name,
          ...(NextToken ? { NextToken } : {}),
        }),
      );
      const found = (page.Schedules ?? []).find((s) => s.Name === Name && s.GroupName === this.opts.group);
      if (found) {
        const region = await this.opts.client.config.region();
        return {
          kind: "schedule",
          id: Name,
          why: `the TTL teardown schedule is still ${found.State === "DISABLED" ? "there (disabled)" : "enabled"}`,
          command: `aws scheduler delete-schedule --region ${region} --group-name ${this.opts.group} --name ${Name}`,
        };
      }
      NextToken = page.NextToken;
    } while (NextToken);
    return undefined;
  }
}

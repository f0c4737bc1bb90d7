import type {
  CreateScheduleCommandInput,
  DeleteScheduleCommandInput,
  GetScheduleCommandInput,
  ListSchedulesCommandInput,
  ScheduleSummary,
  UpdateScheduleCommandInput,
} from "@aws-sdk/client-scheduler";
import { type AuthRequest, AwsError, arn, type Call, type Operations } from "./core.ts";

/**
 * EventBridge Scheduler in the AWS double: schedules in groups, as the Scheduler API reference describes them.
 * Create needs the group to exist (`ResourceNotFoundException`) and a free name (`ConflictException`); Update
 * and Delete need the schedule (`ResourceNotFoundException`); Update replaces the whole definition. Creating or
 * updating authorizes `scheduler:<Op>` on the schedule's ARN and `iam:PassRole` on the target's role with
 * `iam:PassedToService=scheduler.amazonaws.com` (Scheduler passes the role to itself).
 *
 * `fireDue(now)` does what Scheduler does at a one-time schedule's time: it invokes the target (a Lambda
 * function, through `invoke`, as the schedule's role, which must be allowed lambda:InvokeFunction) with the
 * schedule's Input as the event, then deletes the schedule when ActionAfterCompletion is DELETE.
 */

export interface Schedule extends CreateScheduleCommandInput {
  Arn: string;
  CreationDate: Date;
  LastModificationDate: Date;
}

const NAME = /^[0-9a-zA-Z-_.]{1,64}$/;
const AT = /^at\((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\)$/;

export interface FakeSchedulerOptions {
  /** Schedule groups that exist (the deployment's); `default` always does. */
  groups: string[];
  /** Invokes a schedule's target as the role given (the account routes it to the Lambda double). */
  invoke: (target: { arn: string; roleArn: string; input: string | undefined }) => Promise<void>;
}

export class FakeScheduler {
  readonly schedules = new Map<string, Schedule>();
  /** Targets invoked by fireDue, in order. */
  readonly fired: { name: string; group: string; input: string | undefined }[] = [];
  readonly operations: Operations;

  constructor(private readonly opts: FakeSchedulerOptions) {
    this.operations = {
      CreateSchedule: (input: CreateScheduleCommandInput, call: Call) => this.put(input, call, "create"),
      UpdateSchedule: (input: UpdateScheduleCommandInput, call: Call) => this.put(input, call, "update"),
      DeleteSchedule: async (input: DeleteScheduleCommandInput, call: Call) => {
        const group = input.GroupName ?? "default";
        await call.authorize([
          { action: "scheduler:DeleteSchedule", resource: arn.schedule(group, `${input.Name}`) },
        ]);
        if (!this.schedules.delete(this.key(group, input.Name))) throw this.notFound(input.Name);
        return {};
      },
      ListSchedules: (input: ListSchedulesCommandInput, call: Call) => this.list(input, call),
      GetSchedule: async (input: GetScheduleCommandInput, call: Call) => {
        const group = input.GroupName ?? "default";
        await call.authorize([
          { action: "scheduler:GetSchedule", resource: arn.schedule(group, `${input.Name}`) },
        ]);
        const s = this.schedules.get(this.key(group, input.Name));
        if (!s) throw this.notFound(input.Name);
        return structuredClone(s);
      },
    };
  }

  /**
   * ListSchedules: `scheduler:ListSchedules` takes no resource (`*`); GroupName (an unknown one is
   * ResourceNotFoundException), NamePrefix, State; pages of MaxResults (1 to 100) with NextToken. Summaries, in
   * name order, without the target's input.
   */
  private async list(input: ListSchedulesCommandInput, call: Call) {
    await call.authorize([{ action: "scheduler:ListSchedules", resource: "*" }]);
    if (input.GroupName && input.GroupName !== "default" && !this.opts.groups.includes(input.GroupName)) {
      throw new AwsError(
        "ResourceNotFoundException",
        `Schedule group ${input.GroupName} does not exist.`,
        404,
      );
    }
    const size = input.MaxResults ?? 100;
    if (size < 1 || size > 100) {
      throw new AwsError(
        "ValidationException",
        `1 validation error detected: Value '${size}' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 100`,
      );
    }
    const found = [...this.schedules.values()]
      .filter((s) => !input.GroupName || (s.GroupName ?? "default") === input.GroupName)
      .filter((s) => !input.NamePrefix || (s.Name ?? "").startsWith(input.NamePrefix))
      .filter((s) => !input.State || (s.State ?? "ENABLED") === input.State)
      .sort((a, b) => `${a.GroupName}/${a.Name}`.localeCompare(`${b.GroupName}/${b.Name}`));
    const start = input.NextToken ? Number(Buffer.from(input.NextToken, "base64").toString()) : 0;
    if (!Number.isInteger(start) || start < 0) throw new AwsError("ValidationException", "Invalid NextToken");
    const page = found.slice(start, start + size).map(
      (s): ScheduleSummary => ({
        Arn: s.Arn,
        Name: s.Name,
        GroupName: s.GroupName ?? "default",
        State: s.State ?? "ENABLED",
        CreationDate: s.CreationDate,
        LastModificationDate: s.LastModificationDate,
        Target: { Arn: s.Target?.Arn },
      }),
    );
    const next =
      start + size < found.length ? Buffer.from(String(start + size)).toString("base64") : undefined;
    return { Schedules: page, ...(next ? { NextToken: next } : {}) };
  }

  private key(group: string, name: string | undefined): string {
    return `${group}/${name}`;
  }

  private notFound(name: string | undefined): AwsError {
    return new AwsError("ResourceNotFoundException", `Schedule ${name} does not exist.`, 404);
  }

  private async put(input: CreateScheduleCommandInput, call: Call, how: "create" | "update") {
    const group = input.GroupName ?? "default";
    const name = input.Name ?? "";
    const scheduleArn = arn.schedule(group, name);
    const auth: AuthRequest[] = [
      {
        action: how === "create" ? "scheduler:CreateSchedule" : "scheduler:UpdateSchedule",
        resource: scheduleArn,
      },
    ];
    if (input.Target?.RoleArn) {
      auth.push({
        action: "iam:PassRole",
        resource: input.Target.RoleArn,
        context: { "iam:PassedToService": "scheduler.amazonaws.com" },
      });
    }
    await call.authorize(auth);
    if (!NAME.test(name))
      throw new AwsError(
        "ValidationException",
        `1 validation error detected: Value '${name}' at 'name' failed to satisfy constraint`,
      );
    if (group !== "default" && !this.opts.groups.includes(group)) {
      throw new AwsError("ResourceNotFoundException", `Schedule group ${group} does not exist.`, 404);
    }
    if (
      !input.ScheduleExpression ||
      !input.FlexibleTimeWindow ||
      !input.Target?.Arn ||
      !input.Target.RoleArn
    ) {
      throw new AwsError(
        "ValidationException",
        "ScheduleExpression, FlexibleTimeWindow and Target (Arn, RoleArn) are required",
      );
    }
    const k = this.key(group, name);
    const existing = this.schedules.get(k);
    if (how === "create" && existing)
      throw new AwsError("ConflictException", `Schedule ${name} already exists.`, 409);
    if (how === "update" && !existing) throw this.notFound(name);
    const now = new Date();
    this.schedules.set(k, {
      ...structuredClone(input),
      Arn: scheduleArn,
      CreationDate: existing?.CreationDate ?? now,
      LastModificationDate: now,
    });
    return { ScheduleArn: scheduleArn };
  }

  /** When a one-time schedule fires (its `at()` time in UTC), or undefined for other expressions. */
  static dueAt(s: Schedule): Date | undefined {
    const m = AT.exec(s.ScheduleExpression ?? "");
    return m ? new Date(`${m[1]}Z`) : undefined;
  }

  /** Fires every enabled one-time schedule due at `now` (or only `name`), as Scheduler would at its time. */
  async fireDue(now: Date, only?: string): Promise<number> {
    let n = 0;
    for (const [k, s] of [...this.schedules]) {
      const at = FakeScheduler.dueAt(s);
      if (only !== undefined ? s.Name !== only : !at || at.getTime() > now.getTime()) continue;
      if (s.State === "DISABLED") continue;
      const target = s.Target as NonNullable<Schedule["Target"]>;
      await this.opts.invoke({
        arn: target.Arn as string,
        roleArn: target.RoleArn as string,
        input: target.Input,
      });
      this.fired.push({ name: s.Name as string, group: s.GroupName ?? "default", input: target.Input });
      if (s.ActionAfterCompletion === "DELETE") this.schedules.delete(k);
      n++;
    }
    return n;
  }
}

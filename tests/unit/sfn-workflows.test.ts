import {
  DescribeExecutionCommand,
  ExecutionAlreadyExists,
  ExecutionDoesNotExist,
  ExecutionLimitExceeded,
  GetExecutionHistoryCommand,
  type HistoryEvent,
  SFNClient,
  StartExecutionCommand,
  StateMachineDoesNotExist,
  StopExecutionCommand,
  ValidationException,
} from "@aws-sdk/client-sfn";
import { mockClient } from "aws-sdk-client-mock";
import { beforeEach, describe, expect, it } from "vitest";
import {
  executionArnOf,
  STOP_CAUSE,
  STOP_ERROR,
  StepFunctionsWorkflows,
  transitionsOf,
} from "../../shared/cloud/step-functions.ts";
import type { RunInput, RunKind } from "../../shared/fleet/workflows.ts";

const sfnMock = mockClient(SFNClient);
const PREFIX = "arn:aws:states:eu-west-1:123456789012";
const UP = `${PREFIX}:stateMachine:labfleet-up`;
const TEARDOWN = `${PREFIX}:stateMachine:labfleet-teardown`;
const ROLLOUT = `${PREFIX}:stateMachine:labfleet-rollout`;
const EXEC = `${PREFIX}:stateMachine:labfleet-exec`;
const RUN = "run_01J9Z3Q8V6K1M2N3P4R5S6T7V8";
const UP_EXECUTION = `${PREFIX}:execution:labfleet-up:${RUN}`;
const TEARDOWN_EXECUTION = `${PREFIX}:execution:labfleet-teardown:${RUN}`;
const meta = { $metadata: {} };

function workflows(): StepFunctionsWorkflows {
  return new StepFunctionsWorkflows({
    client: new SFNClient({}),
    stateMachineArns: { up: UP, teardown: TEARDOWN, rollout: ROLLOUT, exec: EXEC },
  });
}

const input: RunInput = { workshop: "k8s-intro", runId: RUN, force: false };

beforeEach(() => {
  sfnMock.reset();
});

describe("executionArnOf", () => {
  it("turns a state machine ARN and a run id into the execution ARN, in any partition", () => {
    expect(executionArnOf(UP, RUN)).toBe(UP_EXECUTION);
    expect(executionArnOf("arn:aws-cn:states:cn-north-1:123456789012:stateMachine:up", "run_X")).toBe(
      "arn:aws-cn:states:cn-north-1:123456789012:execution:up:run_X",
    );
  });

  it("rejects what is not a state machine ARN, and so does the constructor", () => {
    expect(() => executionArnOf(`${PREFIX}:execution:labfleet-up:${RUN}`, RUN)).toThrow(/state machine ARN/);
    expect(() => executionArnOf(`${UP}:3`, RUN)).toThrow(/state machine ARN/);
    expect(
      () =>
        new StepFunctionsWorkflows({
          client: new SFNClient({}),
          stateMachineArns: { up: UP, teardown: "labfleet-teardown", rollout: ROLLOUT, exec: EXEC },
        }),
    ).toThrow(/labfleet-teardown/);
  });
});

describe("StepFunctionsWorkflows.start", () => {
  it.each<[RunKind, string]>([
    ["up", UP],
    ["deploy", UP],
    ["retry", UP],
    ["teardown", TEARDOWN],
    ["rollout", ROLLOUT],
  ])("starts %s on its definition's machine, named after the run, with the run input", async (kind, arn) => {
    sfnMock.on(StartExecutionCommand).resolves({ executionArn: "x", startDate: new Date() });
    await workflows().start(kind, { workshop: "k8s-intro", runId: RUN, force: true });

    const calls = sfnMock.commandCalls(StartExecutionCommand);
    expect(calls).toHaveLength(1);
    expect(calls[0]?.args[0].input).toEqual({
      stateMachineArn: arn,
      name: RUN,
      input: JSON.stringify({ workshop: "k8s-intro", runId: RUN, force: true }),
    });
    expect(sfnMock.calls()).toHaveLength(1);
  });

  it("sends the run input the local executor runs with, and nothing else", async () => {
    sfnMock.on(StartExecutionCommand).resolves({});
    const wf = workflows();
    await wf.start("up", { ...input, secret: "hunter2", hosts: ["h1"] } as RunInput);
    await wf.start("up", { workshop: "k8s-intro", runId: "run_NOFORCE" });

    const [withExtras, withoutForce] = sfnMock.commandCalls(StartExecutionCommand);
    expect(JSON.parse(withExtras?.args[0].input.input ?? "")).toStrictEqual(input);
    expect(withExtras?.args[0].input.input).not.toContain("hunter2");
    // As in the local executor, an absent force stays absent (JSON has no undefined).
    expect(JSON.parse(withoutForce?.args[0].input.input ?? "")).toStrictEqual({
      workshop: "k8s-intro",
      runId: "run_NOFORCE",
    });
  });

  it("treats ExecutionAlreadyExists for the same input as success (a repeated start of the run)", async () => {
    sfnMock
      .on(StartExecutionCommand)
      .rejects(new ExecutionAlreadyExists({ ...meta, message: "Execution Already Exists" }));
    // Key order differs: the inputs are compared as JSON, not as text.
    sfnMock.on(DescribeExecutionCommand).resolves({
      executionArn: UP_EXECUTION,
      status: "SUCCEEDED",
      input: JSON.stringify({ force: false, runId: RUN, workshop: "k8s-intro" }),
    });

    await expect(workflows().start("deploy", input)).resolves.toBeUndefined();
    const describes = sfnMock.commandCalls(DescribeExecutionCommand);
    expect(describes.map((c) => c.args[0].input)).toEqual([{ executionArn: UP_EXECUTION }]);
  });

  it("keeps ExecutionAlreadyExists an error when the existing execution has another input", async () => {
    sfnMock
      .on(StartExecutionCommand)
      .rejects(new ExecutionAlreadyExists({ ...meta, message: "Execution Already Exists" }));
    sfnMock.on(DescribeExecutionCommand).resolves({
      executionArn: TEARDOWN_EXECUTION,
      status: "RUNNING",
      input: JSON.stringify({ workshop: "other-workshop", runId: RUN, force: false }),
    });

    await expect(workflows().start("teardown", input)).rejects.toBeInstanceOf(ExecutionAlreadyExists);
    expect(sfnMock.commandCalls(DescribeExecutionCommand)[0]?.args[0].input).toEqual({
      executionArn: TEARDOWN_EXECUTION,
    });
  });

  it.each([
    ["ExecutionLimitExceeded", new ExecutionLimitExceeded({ ...meta, message: "limit" })],
    ["StateMachineDoesNotExist", new StateMachineDoesNotExist({ ...meta, message: "no machine" })],
    ["a network error", new Error("socket hang up")],
  ])("propagates %s without looking the execution up", async (_name, error) => {
    sfnMock.on(StartExecutionCommand).rejects(error);
    await expect(workflows().start("up", input)).rejects.toBe(error);
    expect(sfnMock.commandCalls(DescribeExecutionCommand)).toHaveLength(0);
  });
});

describe("StepFunctionsWorkflows.stop", () => {
  it("stops the up execution, derived from the up machine, with a labfleet cause", async () => {
    sfnMock.on(StopExecutionCommand).resolves({ stopDate: new Date() });
    await workflows().stop(RUN);

    const calls = sfnMock.commandCalls(StopExecutionCommand);
    expect(calls.map((c) => c.args[0].input)).toEqual([
      { executionArn: UP_EXECUTION, error: STOP_ERROR, cause: STOP_CAUSE },
    ]);
    expect(STOP_CAUSE).toMatch(/labfleet/);
    expect(STOP_ERROR).toMatch(/labfleet/);
  });

  it("tries the teardown machine when the up machine has no such execution", async () => {
    sfnMock
      .on(StopExecutionCommand, { executionArn: UP_EXECUTION })
      .rejects(new ExecutionDoesNotExist({ ...meta, message: "Execution Does Not Exist" }))
      .on(StopExecutionCommand, { executionArn: TEARDOWN_EXECUTION })
      .resolves({ stopDate: new Date() });
    await workflows().stop(RUN);

    expect(sfnMock.commandCalls(StopExecutionCommand).map((c) => c.args[0].input)).toEqual([
      { executionArn: UP_EXECUTION, error: STOP_ERROR, cause: STOP_CAUSE },
      { executionArn: TEARDOWN_EXECUTION, error: STOP_ERROR, cause: STOP_CAUSE },
    ]);
  });

  it("is fine when no machine has the execution, the rollout machine tried last", async () => {
    sfnMock
      .on(StopExecutionCommand)
      .rejects(new ExecutionDoesNotExist({ ...meta, message: "Execution Does Not Exist" }));
    await expect(workflows().stop(RUN)).resolves.toBeUndefined();
    expect(sfnMock.commandCalls(StopExecutionCommand).map((c) => c.args[0].input.executionArn)).toEqual([
      UP_EXECUTION,
      TEARDOWN_EXECUTION,
      `${PREFIX}:execution:labfleet-rollout:${RUN}`,
    ]);
    expect(sfnMock.commandCalls(DescribeExecutionCommand)).toHaveLength(0);
  });

  it("is fine when the execution has already ended, should Step Functions refuse the stop", async () => {
    sfnMock
      .on(StopExecutionCommand)
      .rejects(new ValidationException({ ...meta, message: "Execution is not running" }));
    sfnMock.on(DescribeExecutionCommand).resolves({ executionArn: UP_EXECUTION, status: "SUCCEEDED" });

    await expect(workflows().stop(RUN)).resolves.toBeUndefined();
    expect(sfnMock.commandCalls(StopExecutionCommand)).toHaveLength(1);
    expect(sfnMock.commandCalls(DescribeExecutionCommand)[0]?.args[0].input).toEqual({
      executionArn: UP_EXECUTION,
    });
  });

  it("propagates a refused stop of an execution still running", async () => {
    const error = new ValidationException({ ...meta, message: "nope" });
    sfnMock.on(StopExecutionCommand).rejects(error);
    sfnMock.on(DescribeExecutionCommand).resolves({ executionArn: UP_EXECUTION, status: "RUNNING" });
    await expect(workflows().stop(RUN)).rejects.toBe(error);
  });

  it("propagates other errors, not trying the next machine", async () => {
    const error = new Error("AccessDeniedException");
    sfnMock.on(StopExecutionCommand).rejects(error);
    sfnMock.on(DescribeExecutionCommand).rejects(error);
    await expect(workflows().stop(RUN)).rejects.toBe(error);
    expect(sfnMock.commandCalls(StopExecutionCommand)).toHaveLength(1);
  });
});

describe("transitionsOf", () => {
  const event = (id: number, type: HistoryEvent["type"]): HistoryEvent => ({
    id,
    type,
    timestamp: new Date("2030-01-01T00:00:00Z"),
  });

  it("pages the execution history and counts only the state-entered events", async () => {
    sfnMock
      .on(GetExecutionHistoryCommand)
      .resolvesOnce({
        events: [
          event(1, "ExecutionStarted"),
          event(2, "TaskStateEntered"),
          event(3, "LambdaFunctionScheduled"),
          event(4, "LambdaFunctionSucceeded"),
          event(5, "TaskStateExited"),
          event(6, "MapStateEntered"),
          event(7, "MapIterationStarted"),
          event(8, "PassStateEntered"),
          event(9, "ChoiceStateEntered"),
          event(10, "ParallelStateEntered"),
        ],
        nextToken: "page-2",
      })
      .resolvesOnce({
        events: [
          event(11, "WaitStateEntered"),
          event(12, "WaitStateExited"),
          event(13, "FailStateEntered"),
          event(14, "SucceedStateEntered"),
          event(15, "ExecutionSucceeded"),
        ],
      });

    await expect(transitionsOf(new SFNClient({}), UP_EXECUTION)).resolves.toBe(8);
    expect(sfnMock.commandCalls(GetExecutionHistoryCommand).map((c) => c.args[0].input)).toEqual([
      { executionArn: UP_EXECUTION, maxResults: 1000, includeExecutionData: false },
      { executionArn: UP_EXECUTION, maxResults: 1000, includeExecutionData: false, nextToken: "page-2" },
    ]);
  });

  it("counts zero for a history without state-entered events, in one call", async () => {
    sfnMock.on(GetExecutionHistoryCommand).resolves({ events: [event(1, "ExecutionStarted")] });
    await expect(transitionsOf(new SFNClient({}), UP_EXECUTION)).resolves.toBe(0);
    expect(sfnMock.commandCalls(GetExecutionHistoryCommand)).toHaveLength(1);
  });
});

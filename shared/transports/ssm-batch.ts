import { SendCommandCommand, type SendCommandCommandInput, type SSMClient } from "@aws-sdk/client-ssm";

/** SendCommand targets at most 50 instance ids (InstanceIds' length constraint). */
export const SSM_SEND_MAX_TARGETS = 50;
/** How long a send waits for others of the same script before it goes: one burst of a fleet's fan-out. */
export const SSM_BATCH_WINDOW_MS = 20;

/** One command to send to one instance: the same script and settings on many instances can share a SendCommand. */
export interface SsmSend {
  instanceId: string;
  /** The AWS-RunShellScript `commands` parameter (one script). */
  script: string;
  executionTimeoutS: number;
  deliveryTimeoutS: number;
  /** The command's Comment, for one instance (at most 100 characters are kept). */
  comment: string;
  /** The Comment when the command goes to several instances (it names no host). */
  sharedComment: string;
}

interface Group {
  /** In order of arrival; the first one's script and timeouts are the group's. */
  waiters: { send: SsmSend; resolve: (id: string) => void; reject: (err: unknown) => void }[];
  timer?: ReturnType<typeof setTimeout>;
}

/**
 * Coalesces Run Command sends: what a fleet's fan-out sends to many instances at once (the poll's probe, a
 * doctor's checks, one `exec`) goes as one SendCommand per SSM_SEND_MAX_TARGETS instances instead of one per
 * instance, as `aws ssm send-command --instance-ids ...` does. Sends of the same script, execution timeout and
 * delivery timeout within SSM_BATCH_WINDOW_MS of the first share a command; each instance still has its own
 * invocation (its own status, exit code and output, read with GetCommandInvocation, cancelled on its own).
 *
 * SendCommand refuses a whole request for one instance it cannot target (InvalidInstanceId: stopped, terminated,
 * agent not registered) or one it may not (AccessDenied on that instance): when a shared send fails, each of its
 * instances is sent alone, so every host gets its own answer and one bad host never fails the others.
 */
export class SsmSendBatcher {
  private readonly open = new Map<string, Group>();

  constructor(
    private readonly client: SSMClient,
    private readonly opts: { windowMs?: number; maxTargets?: number } = {},
  ) {}

  /** Sends `s` (with others of the same script, when they come within the window); resolves to its command id. */
  send(s: SsmSend): Promise<string> {
    const key = JSON.stringify([s.script, s.executionTimeoutS, s.deliveryTimeoutS]);
    return new Promise<string>((resolve, reject) => {
      let group = this.open.get(key);
      // An instance appears once in a request (DuplicateInstanceId): a second send to it starts the next group.
      if (group?.waiters.some((w) => w.send.instanceId === s.instanceId)) {
        this.flush(key, group);
        group = undefined;
      }
      if (!group) {
        const g: Group = { waiters: [] };
        g.timer = setTimeout(() => this.flush(key, g), this.opts.windowMs ?? SSM_BATCH_WINDOW_MS);
        this.open.set(key, g);
        group = g;
      }
      group.waiters.push({ send: s, resolve, reject });
      if (group.waiters.length >= (this.opts.maxTargets ?? SSM_SEND_MAX_TARGETS)) this.flush(key, group);
    });
  }

  private flush(key: string, group: Group): void {
    if (this.open.get(key) === group) this.open.delete(key);
    clearTimeout(group.timer);
    void this.dispatch(group);
  }

  private async dispatch(group: Group): Promise<void> {
    const { waiters } = group;
    const first = waiters[0]?.send;
    if (!first) return;
    const one = waiters.length === 1;
    try {
      const id = await sendRunShellScript(
        this.client,
        first,
        waiters.map((w) => w.send.instanceId),
        one ? first.comment : first.sharedComment,
      );
      for (const w of waiters) w.resolve(id);
    } catch (err) {
      if (one) {
        waiters[0]?.reject(err);
        return;
      }
      // Each instance alone: the ones SSM can reach go, the others get their own error.
      await Promise.all(
        waiters.map(async (w) => {
          try {
            w.resolve(await sendRunShellScript(this.client, w.send, [w.send.instanceId], w.send.comment));
          } catch (e) {
            w.reject(e);
          }
        }),
      );
    }
  }
}

/** SendCommand answered without a command id. */
export class NoCommandIdError extends Error {
  override name = "NoCommandIdError";
  constructor() {
    super("SendCommand returned no command id");
  }
}

/** One SendCommand of AWS-RunShellScript to `instanceIds`; resolves to the command id. */
export async function sendRunShellScript(
  client: SSMClient,
  s: SsmSend,
  instanceIds: string[],
  comment: string,
): Promise<string> {
  const input: SendCommandCommandInput = {
    DocumentName: "AWS-RunShellScript",
    InstanceIds: instanceIds,
    Parameters: { commands: [s.script], executionTimeout: [String(s.executionTimeoutS)] },
    TimeoutSeconds: s.deliveryTimeoutS,
    Comment: comment.slice(0, 100),
  };
  const out = await client.send(new SendCommandCommand(input));
  const id = out.Command?.CommandId;
  if (!id) throw new NoCommandIdError();
  return id;
}

import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { DynamoDBDocumentClient } from "@aws-sdk/lib-dynamodb";
import { Entity, type EntityItem, Service } from "electrodb";
import { markStoreErrors } from "./unreachable.ts";

const service = "labfleet";

export const WORKSHOP_STATES = [
  "draft",
  "provisioning",
  "deploying",
  "ready",
  "failed",
  "tearing_down",
  "torn_down",
] as const;
export const HOST_STATES = ["pending", "provisioning", "deploying", "ready", "failed", "torn_down"] as const;
export const EVENT_TYPES = [
  "run.started",
  "run.finished",
  "host.ready",
  "host.failed",
  "lab.claimed",
  "lab.released",
  "lab.unhealthy",
  "lab.healthy",
  "lab.swapped",
  "lab.moved",
  "lab.recovered",
  "lab.unlocked",
  "lab.removed",
  "checks.run",
  "queue.joined",
  "queue.left",
  "portal.published",
  "portal.opened",
  "portal.closed",
  "portal.code_rotated",
  "access.opened",
  "access.closed",
  "workshop.extended",
  "workshop.torn_down",
  /** `labfleet exec`: who ran it, how many hosts, the summary and the command's start (redacted), never output. */
  "exec",
  "teardown.receipt",
  /**
   * A rollout to a new ref: started, finished (completed, halted or aborted), each lab it updated, and each lab it
   * left alone because a student claimed it during the rollout (`student`: the display name).
   */
  "rollout.started",
  "rollout.finished",
  "lab.updated",
  "lab.update_skipped",
  /** Roster mode: an instructor invited a student (`student`: the display name) to a lab. */
  "lab.invited",
  /** An instructor let held-back addresses into the portal again (`addresses`). */
  "portal.unblocked",
  /**
   * Enrolled hosts' agents (shared/agent/check-in.ts, shared/agent/host-controls.ts): a host that missed three
   * check-ins, one that called in again, and an instructor's drain, disable, enable and remove.
   */
  "host.unreachable",
  "host.reachable",
  "host.drained",
  "host.disabled",
  "host.enabled",
  "host.removed",
  /**
   * Enrollment (shared/agent/): a machine joined with a join token (`enrollment`: pending or approved; `student`
   * when it joined from a student's lab join page), an instructor approved or rejected a pending one, and join
   * tokens created (`uses`, `approve`, `expiry`) and revoked (`tokenId`). Never the token itself.
   */
  "host.joined",
  "host.approved",
  "host.rejected",
  "join_token.created",
  "join_token.revoked",
] as const;
export const EVENT_RETENTION_DAYS = 30;
/**
 * deploy and retry run the `up` definition on selected hosts (retry forces a rebuild); provision runs it up to
 * the provisioned hosts and stops there (no lab is deployed).
 */
export const RUN_KINDS = ["up", "deploy", "retry", "provision", "scale", "teardown", "rollout"] as const;
export const RUN_STATES = ["running", "succeeded", "failed", "aborted"] as const;
/** A rollout (shared/fleet/rollout.ts): running, every lab done, stopped by a failure, or stopped by an instructor. */
export const ROLLOUT_STATES = ["running", "completed", "halted", "aborted"] as const;
/**
 * One lab of a rollout: waiting for its batch, its new lab building, the new host promoted in the old one's place
 * (replace) or the host updated where it is (in place), failed, left alone (skipped, with the reason: a student
 * claimed it during the rollout), or stopped by an abort.
 */
export const ROLLOUT_HOST_STATES = [
  "pending",
  "building",
  "promoted",
  "updated",
  "failed",
  "skipped",
  "aborted",
] as const;
/** An exec job: running, asked to stop (cancelling), then how it ended. */
export const EXEC_JOB_STATES = ["running", "cancelling", "succeeded", "failed", "cancelled"] as const;
/** One host of an exec job: running, then its ExecHostResult status. */
export const EXEC_RESULT_STATES = [
  "running",
  "ok",
  "failed",
  "timeout",
  "error",
  "skipped",
  "cancelled",
] as const;
export const SCHEDULE_STATES = ["pending", "fired", "cancelled"] as const;
/** How a host key came to be trusted (see KeyOrigin in shared/transports/host-keys.ts). */
export const HOST_KEY_ORIGINS = ["tofu", "pinned", "ssm"] as const;

function entities(client: DynamoDBDocumentClient, table: string) {
  const config = { client, table };

  const workshop = new Entity(
    {
      model: { entity: "workshop", version: "1", service },
      attributes: {
        name: { type: "string", required: true },
        spec: { type: "any", required: true },
        yaml: { type: "string", required: true },
        state: { type: WORKSHOP_STATES, required: true, default: "draft" },
        lastRunId: { type: "string" },
        /** The run that owns the workshop now; set and cleared with conditional writes (one run at a time). */
        activeRunId: { type: "string" },
        /** Hosts taken out by `down --unclaimed`: a later up does not bring them back. */
        removedHosts: { type: "list", items: { type: "string" } },
        /** The last open-access or close by an instructor: a workflow never reopens what one closed. */
        studentAccess: { type: ["open", "closed"] as const },
        expiry: { type: "string" },
        createdAt: { type: "string", required: true, readOnly: true },
        updatedAt: { type: "string", required: true },
      },
      indexes: {
        byName: { pk: { field: "pk", composite: ["name"] }, sk: { field: "sk", composite: [] } },
        all: {
          index: "gsi1",
          pk: { field: "gsi1pk", composite: [] },
          sk: { field: "gsi1sk", composite: ["name"] },
        },
      },
    },
    config,
  );

  const host = new Entity(
    {
      model: { entity: "host", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        hostId: { type: "string", required: true },
        state: { type: HOST_STATES, required: true, default: "pending" },
        phase: { type: "string" },
        phases: {
          type: "list",
          items: {
            type: "map",
            properties: {
              name: { type: "string", required: true },
              state: { type: "string", required: true },
              /** When labfleet first saw the phase (a poll's time), and when it first saw it done or failed. */
              startedAt: { type: "string" },
              endedAt: { type: "string" },
            },
          },
        },
        error: { type: "string" },
        provider: { type: "string", required: true },
        providerId: { type: "string" },
        address: { type: "string" },
        ssh: { type: "string" },
        publicIp: { type: "string" },
        labels: { type: "any" },
        expiry: { type: "string" },
        deployStartedAt: { type: "string" },
        readyAt: { type: "string" },
        attempt: { type: "number", default: 0 },
        access: { type: "string" },
        /**
         * Health while in use (shared/fleet/health.ts): `lab.health` run on a ready lab every
         * lab.health_interval_seconds; `failing` after HEALTH_FAILURES_TO_FLAG failures in a row, `ok` again at
         * the next pass. Cleared when the lab is rebuilt.
         */
        health: { type: ["ok", "failing"] as const },
        healthCheckedAt: { type: "string" },
        /** Failures in a row of the in-use health check. */
        healthFailures: { type: "number" },
        /** The last failed check's output, redacted with the workshop's secrets. */
        healthError: { type: "string" },
        /**
         * The id the provider knows this lab's machine by, when it is not the lab's own id: a rollout builds the
         * new machine beside the old one under the other of two ids (`student-01`, `student-01.b`) and promotes it.
         */
        machine: { type: "string" },
        /** The git ref this lab was last built at: a run's `--ref` or a rollout's, else lab.ref, else HEAD (git sources). */
        ref: { type: "string" },
        /** A rollout's notice to this lab's student: the lab is about to be updated, or has just been. */
        notice: { type: ["updating", "updated"] as const },
        noticeAt: { type: "string" },
        /**
         * Enrolled hosts (provider `enrolled`, shared/agent/): a host that joined with a join token starts
         * `pending` (no work until approved) or `approved`. Unset for every other provider.
         */
        enrollment: { type: ["pending", "approved"] as const },
        /** An enrolled host's last signed call (its agent's check-in), ISO time. */
        lastSeenAt: { type: "string" },
        /** An enrolled host is `unreachable` once it misses three check-ins, `online` again at its next call. */
        reachable: { type: ["online", "unreachable"] as const },
        /** `drained`: no new work and no new claims; `disabled`: sent nothing at all. */
        drained: { type: "boolean" },
        disabled: { type: "boolean" },
        /** What an enrolled host reported about itself at join (hostname, os, cpus, memoryMb, diskGb, kvm ...). */
        facts: { type: "any" },
        /**
         * When the lab's current machine was made, when that is after the record's `createdAt`: a rollout that
         * promoted a new machine (the old one's life is in hostLife). The receipt's host-hours start here.
         */
        machineCreatedAt: { type: "string" },
        createdAt: { type: "string", required: true, readOnly: true },
        updatedAt: { type: "string", required: true },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["hostId"] },
        },
      },
    },
    config,
  );

  /** A rollout of a workshop to a new ref (shared/fleet/rollout.ts); its labs are rolloutHost items. */
  const rollout = new Entity(
    {
      model: { entity: "rollout", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        rolloutId: { type: "string", required: true },
        ref: { type: "string", required: true },
        /** The workshop's lab.ref when the rollout started (absent: the source's default branch). */
        fromRef: { type: "string" },
        state: { type: ROLLOUT_STATES, required: true },
        canary: { type: "number", required: true },
        batch: { type: "number", required: true },
        includeClaimed: { type: "boolean", default: false },
        /** The run carrying the rollout now (a resume starts another). */
        runId: { type: "string", required: true },
        /** The batch being built, and when its labs must be ready by. */
        batchIndex: { type: "number" },
        batchDeadline: { type: "string" },
        by: { type: "string" },
        error: { type: "string" },
        createdAt: { type: "string", required: true, readOnly: true },
        updatedAt: { type: "string", required: true },
        endedAt: { type: "string" },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["rolloutId"] },
        },
      },
    },
    config,
  );

  const rolloutHost = new Entity(
    {
      model: { entity: "rolloutHost", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        rolloutId: { type: "string", required: true },
        hostId: { type: "string", required: true },
        /** 0 is the canary batch. */
        batch: { type: "number", required: true },
        /** replace: a new host beside the old one, then promoted; in_place: a bring-your-own host updated where it is. */
        mode: { type: ["replace", "in_place"] as const, required: true },
        state: { type: ROLLOUT_HOST_STATES, required: true },
        fromRef: { type: "string" },
        /**
         * The student's display name (never an email): who held the lab when the rollout started, or who claimed it
         * during the rollout (then told before and after with includeClaimed, else the lab is left alone).
         */
        student: { type: "string" },
        /** Why the rollout left the lab alone (state skipped): claimed during the rollout, no longer ready. */
        reason: { type: "string" },
        /**
         * A bring-your-own host an earlier rollout left needing attention (its update failed or was stopped): this
         * rollout updates it in place from where it is, off the board.
         */
        needsAttention: { type: "boolean" },
        /** The new machine (replace): its provider-side id, address and ids. */
        machine: { type: "string" },
        address: { type: "string" },
        providerId: { type: "string" },
        publicIp: { type: "string" },
        /** lab.health on the new lab: passed, or failed (with the reason in error). */
        gate: { type: ["passed", "failed"] as const },
        /** The new lab's failed lab.health checks in a row since its setup finished (the gate's retries). */
        healthFailures: { type: "number" },
        error: { type: "string" },
        /** The end of the failed setup's log, redacted. */
        logTail: { type: "string" },
        startedAt: { type: "string" },
        endedAt: { type: "string" },
        updatedAt: { type: "string", required: true },
      },
      indexes: {
        byRollout: {
          pk: { field: "pk", composite: ["workshop", "rolloutId"] },
          sk: { field: "sk", composite: ["hostId"] },
        },
      },
    },
    config,
  );

  const run = new Entity(
    {
      model: { entity: "run", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        runId: { type: "string", required: true },
        kind: { type: RUN_KINDS, required: true },
        state: { type: RUN_STATES, required: true },
        force: { type: "boolean", default: false },
        /** The host ids a deploy or retry acts on; none means every host. */
        selection: { type: "list", items: { type: "string" } },
        /** A git ref overriding lab.ref for this run (`deploy --ref`). */
        ref: { type: "string" },
        /** Deploy concurrency overriding lab.concurrency (`-j`). */
        concurrency: { type: "number" },
        /**
         * The stages this run goes through (`--only`/`--skip`, shared/fleet/stages.ts); absent: every stage (a
         * provision run: provision alone).
         */
        stages: { type: "list", items: { type: "string" } },
        /** The hosts its deploy step starts at once, as BeginUp bounded it (the ready estimate's waves). */
        deployConcurrency: { type: "number" },
        deadline: { type: "string" },
        startedAt: { type: "string", required: true },
        endedAt: { type: "string" },
        transitions: { type: "number", default: 0 },
        hosts: { type: "any" },
        error: { type: "string" },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["runId"] },
        },
      },
    },
    config,
  );

  /**
   * An exec job (shared/fleet/exec-jobs.ts): one command on the selected hosts, run by the `exec` workflow. The
   * command is kept while the job runs (the workflow dispatches it to hosts as slots free up) and removed when it
   * ends; `commandText` is the redacted start the answers show. Ends by TTL a day after it started.
   */
  const execJob = new Entity(
    {
      model: { entity: "execJob", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        jobId: { type: "string", required: true },
        state: { type: EXEC_JOB_STATES, required: true },
        /** Sealed with the access key: the whole command (removed once the job ends). */
        command: { type: "string" },
        /** The command as the `exec` event keeps it (redacted, cut). */
        commandText: { type: "string", required: true },
        /** The selected host ids, in the order results are answered and hosts started. */
        hostIds: { type: "list", items: { type: "string" }, required: true },
        concurrency: { type: "number", required: true },
        maxErrors: { type: "number" },
        timeoutSeconds: { type: "number", required: true },
        /** The workflow's steps so far (each polls the running hosts and starts more). */
        steps: { type: "number", default: 0 },
        transitions: { type: "number", default: 0 },
        /** Why no further host is started (max errors reached, cancelled). */
        stopped: { type: "string" },
        by: { type: "string", required: true },
        startedAt: { type: "string", required: true },
        endedAt: { type: "string" },
        /** Why the job failed outside its hosts (the workflow's own error). */
        error: { type: "string" },
        /** Epoch seconds (DynamoDB TTL). */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["jobId"] },
        },
      },
    },
    config,
  );

  /**
   * One host's part of an exec job: `running` from its start on the host until its result is collected, then
   * the ExecHostResult (output bounded by EXEC_OUTPUT_BYTES per stream, so an item stays far under 400 KB).
   */
  const execResult = new Entity(
    {
      model: { entity: "execResult", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        jobId: { type: "string", required: true },
        hostId: { type: "string", required: true },
        status: { type: EXEC_RESULT_STATES, required: true },
        /** Epoch ms the command was started on the host. */
        startedMs: { type: "number" },
        exitCode: { type: "number" },
        stdout: { type: "string" },
        stderr: { type: "string" },
        stdoutTruncated: { type: "boolean" },
        stderrTruncated: { type: "boolean" },
        stdoutBytes: { type: "number" },
        stderrBytes: { type: "number" },
        durationMs: { type: "number" },
        reason: { type: "string" },
        /** Polls of a running host that could not reach it in a row. */
        misses: { type: "number" },
        updatedAt: { type: "string", required: true },
        /** Epoch seconds (DynamoDB TTL). */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byJob: {
          pk: { field: "pk", composite: ["workshop", "jobId"] },
          sk: { field: "sk", composite: ["hostId"] },
        },
      },
    },
    config,
  );

  const schedule = new Entity(
    {
      model: { entity: "schedule", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        kind: { type: ["teardown"] as const, required: true },
        at: { type: "string", required: true },
        state: { type: SCHEDULE_STATES, required: true },
        runId: { type: "string" },
        firedAt: { type: "string" },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["kind"] },
        },
        due: {
          index: "gsi1",
          pk: { field: "gsi1pk", composite: ["state"] },
          sk: { field: "gsi1sk", composite: ["at", "workshop", "kind"] },
        },
      },
    },
    config,
  );

  /**
   * The SSH host keys trusted for a host, per workshop: the key it showed at first contact (`tofu`), or keys
   * obtained another way (`pinned` with `labfleet hosts pin`, `ssm` read through SSM). Keys given in workshop.yaml
   * (hosts[].host_key) live in the workshop's spec, not here.
   */
  const hostKey = new Entity(
    {
      model: { entity: "hostKey", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        /** A host id, or `bastion:<address>` for a bastion. */
        hostId: { type: "string", required: true },
        /** The (first) OpenSSH public key blob, base64. */
        key: { type: "string", required: true },
        fingerprint: { type: "string", required: true },
        /** Every key the host may show (blobs, base64), `key` first; absent on records that hold only `key`. */
        keys: { type: "list", items: { type: "string" } },
        /** How the keys were obtained; absent on records pinned at first contact before origins were recorded. */
        origin: { type: HOST_KEY_ORIGINS },
        /** For `ssm`: the instance the keys were read from (a replaced instance is read again). */
        address: { type: "string" },
        pinnedAt: { type: "string", required: true },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["hostId"] },
        },
      },
    },
    config,
  );

  /** A workshop's claim portal: window, mode and the current workshop code (sealed; its hash finds it). */
  const portal = new Entity(
    {
      model: { entity: "portal", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        state: { type: ["published", "open", "closed"] as const, required: true },
        mode: { type: ["open", "roster", "both"] as const, required: true },
        codeSealed: { type: "string", required: true },
        codeHash: { type: "string", required: true },
        /** Goes up at each rotate-code: access cookies of an older version stop working. */
        codeVersion: { type: "number", required: true },
        /** SHA-256 of the instructor page's secret link. */
        adminHash: { type: "string" },
        paused: { type: "boolean", default: false },
        updatedAt: { type: "string", required: true },
      },
      indexes: {
        byWorkshop: { pk: { field: "pk", composite: ["workshop"] }, sk: { field: "sk", composite: [] } },
      },
    },
    config,
  );

  /** Finds a workshop from the hash of a code typed on the front page. */
  const portalCode = new Entity(
    {
      model: { entity: "portalCode", version: "1", service },
      attributes: {
        codeHash: { type: "string", required: true },
        workshop: { type: "string", required: true },
        codeVersion: { type: "number", required: true },
      },
      indexes: {
        byHash: { pk: { field: "pk", composite: ["codeHash"] }, sk: { field: "sk", composite: [] } },
      },
    },
    config,
  );

  /** One lab's claim: at most one per lab (the key), written in one transaction with its email and link. */
  const claim = new Entity(
    {
      model: { entity: "claim", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        hostId: { type: "string", required: true },
        name: { type: "string", required: true },
        emailHash: { type: "string", required: true },
        emailSealed: { type: "string", required: true },
        pinHash: { type: "string", required: true },
        linkHash: { type: "string", required: true },
        how: { type: ["open", "roster", "reassign", "queue"] as const, required: true },
        claimedAt: { type: "string", required: true },
        firstOpenedAt: { type: "string" },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["hostId"] },
        },
      },
    },
    config,
  );

  /** An email's lab in a workshop: at most one (the key), with its failed PIN count and lock. */
  const claimEmail = new Entity(
    {
      model: { entity: "claimEmail", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        emailHash: { type: "string", required: true },
        hostId: { type: "string", required: true },
        failedPins: { type: "number", default: 0 },
        locked: { type: "boolean", default: false },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["emailHash"] },
        },
      },
    },
    config,
  );

  /** A personal link (stored as SHA-256 only) resolves to one claim. */
  const claimLink = new Entity(
    {
      model: { entity: "claimLink", version: "1", service },
      attributes: {
        linkHash: { type: "string", required: true },
        workshop: { type: "string", required: true },
        hostId: { type: "string", required: true },
      },
      indexes: {
        byHash: { pk: { field: "pk", composite: ["linkHash"] }, sk: { field: "sk", composite: [] } },
      },
    },
    config,
  );

  /**
   * The last result of one check of a lab's claim ("Check my work", shared/portal/checks.ts). `claimedAt` names
   * the claim it belongs to: a result of an earlier claim of the lab is never shown, and is deleted when the lab
   * is released and at teardown. `output` is a short tail of what the check printed, operator secrets redacted,
   * shown only to the lab's student and the instructor.
   */
  const checkResult = new Entity(
    {
      model: { entity: "checkResult", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        hostId: { type: "string", required: true },
        check: { type: "string", required: true },
        claimedAt: { type: "string", required: true },
        passed: { type: "boolean", required: true },
        timedOut: { type: "boolean", default: false },
        ranAt: { type: "string", required: true },
        attempts: { type: "number", required: true },
        output: { type: "string", default: "" },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["hostId", "check"] },
        },
      },
    },
    config,
  );

  /**
   * A lab's last "Check my work" press: one item per lab, written with a condition so that one claim runs its
   * checks at most once per window, whichever process the presses reach.
   */
  const checkPress = new Entity(
    {
      model: { entity: "checkPress", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        hostId: { type: "string", required: true },
        claimedAt: { type: "string", required: true },
        /** Epoch ms of the press. */
        at: { type: "number", required: true },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["hostId"] },
        },
      },
    },
    config,
  );

  /**
   * A place in a workshop's waiting line (shared/portal/queue.ts). The sort key is the join time and a random
   * tie-break, so a query of the workshop's entries reads the line in order. It holds what the claim will
   * hold once a lab is handed over, in the same transaction that removes it.
   */
  const queueEntry = new Entity(
    {
      model: { entity: "queueEntry", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        /** `<join time, ISO>#<random>`: the entry's place in the line. */
        place: { type: "string", required: true },
        name: { type: "string", required: true },
        emailHash: { type: "string", required: true },
        emailSealed: { type: "string", required: true },
        pinHash: { type: "string", required: true },
        linkHash: { type: "string", required: true },
        joinedAt: { type: "string", required: true },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["place"] },
        },
      },
    },
    config,
  );

  /** An email's place in the line: at most one (the key), with its failed PIN count and lock, as claimEmail. */
  const queueEmail = new Entity(
    {
      model: { entity: "queueEmail", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        emailHash: { type: "string", required: true },
        place: { type: "string", required: true },
        failedPins: { type: "number", default: 0 },
        locked: { type: "boolean", default: false },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["emailHash"] },
        },
      },
    },
    config,
  );

  /** A personal link (SHA-256 only) of a student in line; when a lab is handed over it becomes a claimLink. */
  const queueLink = new Entity(
    {
      model: { entity: "queueLink", version: "1", service },
      attributes: {
        linkHash: { type: "string", required: true },
        workshop: { type: "string", required: true },
        place: { type: "string", required: true },
      },
      indexes: {
        byHash: { pk: { field: "pk", composite: ["linkHash"] }, sk: { field: "sk", composite: [] } },
      },
    },
    config,
  );

  /**
   * BYOD (`portal.enrollment: claim`, shared/portal/byod.ts): a student's personal link before their machine joined.
   * It leads to their join page: the join token made for them (sealed with the runtime's access key, shown only
   * there) until a machine joins with it; the join turns it into the claim's link and deletes this record.
   */
  const joinLink = new Entity(
    {
      model: { entity: "joinLink", version: "1", service },
      attributes: {
        linkHash: { type: "string", required: true },
        workshop: { type: "string", required: true },
        name: { type: "string", required: true },
        /** The join token, sealed. */
        tokenSealed: { type: "string", required: true },
        /** ISO time the join token stops working. */
        expiry: { type: "string", required: true },
        createdAt: { type: "string", required: true },
        /** Epoch seconds: the table's TTL removes the record a day after the token's expiry. */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byHash: { pk: { field: "pk", composite: ["linkHash"] }, sk: { field: "sk", composite: [] } },
      },
    },
    config,
  );

  /** A failure counter for rate limits: one item per scope and 10-minute window, gone by TTL. */
  const rateCounter = new Entity(
    {
      model: { entity: "rateCounter", version: "1", service },
      attributes: {
        key: { type: "string", required: true },
        window: { type: "string", required: true },
        count: { type: "number", default: 0 },
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byKey: { pk: { field: "pk", composite: ["key"] }, sk: { field: "sk", composite: ["window"] } },
      },
    },
    config,
  );

  /**
   * A hold noted by the portal's rate limits (shared/portal/rate-limit.ts) when a counter reached its limit,
   * so the instructor can see who is held back and lift it. Whether it still holds is the counter's to say;
   * the record only names it. Every hold lives in one partition, `key` "holds" (a `key_` partition, like the
   * counters, which the portal's function may reach): holds are few, and listed together.
   */
  const rateHold = new Entity(
    {
      model: { entity: "rateHold", version: "1", service },
      attributes: {
        key: { type: "string", required: true, default: "holds" },
        /** The window (epoch seconds) the limit was reached in. */
        window: { type: "string", required: true },
        /** The counter that reached its limit. */
        counter: { type: "string", required: true },
        address: { type: "string", required: true },
        scope: { type: ["browser", "address", "new_browsers"] as const, required: true },
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byWindow: {
          pk: { field: "pk", composite: ["key"] },
          sk: { field: "sk", composite: ["window", "counter"] },
        },
      },
    },
    config,
  );

  /**
   * An instructor's console session (web/console/session.ts). The cookie holds 32 random bytes; only their
   * SHA-256 is the key. The profile is sealed like claim emails; `csrf` is the session's own CSRF secret.
   */
  const session = new Entity(
    {
      model: { entity: "session", version: "1", service },
      attributes: {
        idHash: { type: "string", required: true },
        userId: { type: "string", required: true },
        via: { type: ["token", "github", "google", "oidc"] as const, required: true },
        /** `{email?, name?}` as JSON, AES-256-GCM with the access key. */
        profileSealed: { type: "string" },
        csrf: { type: "string", required: true },
        createdAt: { type: "string", required: true },
        /** Epoch seconds: the session ends then, and the table's TTL removes the item. */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byHash: { pk: { field: "pk", composite: ["idHash"] }, sk: { field: "sk", composite: [] } },
      },
    },
    config,
  );

  // --- instructor auth (shared/auth): API tokens and device logins -------------------------------------

  /** An instructor API token: its SHA-256 is the key (one strong read verifies it); the token itself is never kept. */
  const apiToken = new Entity(
    {
      model: { entity: "apiToken", version: "1", service },
      attributes: {
        hash: { type: "string", required: true },
        tokenId: { type: "string", required: true },
        name: { type: "string", required: true },
        /** The instructor the token acts for (`github:123`, `oidc:sub`, `bootstrap`). */
        owner: { type: "string", required: true },
        createdAt: { type: "string", required: true, readOnly: true },
        lastUsedAt: { type: "string" },
        /** Epoch seconds: the token stops working then, and the table's TTL removes it. None: until revoked. */
        expiresAt: { type: "number" },
      },
      indexes: {
        byHash: { pk: { field: "pk", composite: ["hash"] }, sk: { field: "sk", composite: [] } },
        all: {
          index: "gsi1",
          pk: { field: "gsi1pk", composite: [] },
          sk: { field: "gsi1sk", composite: ["tokenId"] },
        },
      },
    },
    config,
  );

  /** A `labfleet login` waiting for an instructor to confirm its user code; both codes stored as SHA-256. */
  const deviceLogin = new Entity(
    {
      model: { entity: "deviceLogin", version: "1", service },
      attributes: {
        deviceHash: { type: "string", required: true },
        userCodeHash: { type: "string", required: true },
        clientName: { type: "string", required: true },
        state: { type: ["pending", "approved", "denied", "consumed"] as const, required: true },
        approvedBy: { type: "string" },
        createdAt: { type: "string", required: true },
        lastPolledAt: { type: "string" },
        /** Epoch seconds: the user code expires then, and the table's TTL removes the item. */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byDevice: { pk: { field: "pk", composite: ["deviceHash"] }, sk: { field: "sk", composite: [] } },
        byUserCode: {
          index: "gsi1",
          pk: { field: "gsi1pk", composite: ["userCodeHash"] },
          sk: { field: "gsi1sk", composite: [] },
        },
      },
    },
    config,
  );

  /**
   * A state change worth telling people about (a host ready or failed, a lab claimed, a workshop torn down).
   * The console's live view reads them; in the cloud the table's stream forwards them to an EventBridge bus.
   * Ids are ULIDs, so a workshop's events sort by time. No secrets, no emails: first names and ids only.
   */
  const event = new Entity(
    {
      model: { entity: "event", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        eventId: { type: "string", required: true },
        type: { type: EVENT_TYPES, required: true },
        at: { type: "string", required: true },
        hostId: { type: "string" },
        runId: { type: "string" },
        detail: { type: "any" },
        /** Epoch seconds: events are kept for EVENT_RETENTION_DAYS, then the table's TTL removes them. */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["eventId"] },
        },
      },
    },
    config,
  );

  /**
   * How long one finished build of a lab took, phase by phase (shared/fleet/lab-timings.ts): the basis of the
   * ready estimate of later runs of the same lab. Keyed by the lab's identity (a hash of its source, ref and
   * setup command), newest last; only the last LAB_TIMINGS_KEPT builds of an identity are kept.
   */
  const labTiming = new Entity(
    {
      model: { entity: "labTiming", version: "1", service },
      attributes: {
        identity: { type: "string", required: true },
        finishedAt: { type: "string", required: true },
        hostId: { type: "string", required: true },
        workshop: { type: "string", required: true },
        runId: { type: "string", required: true },
        /** From the deploy's start to ready. */
        totalSeconds: { type: "number", required: true },
        phases: {
          type: "list",
          required: true,
          items: {
            type: "map",
            properties: {
              name: { type: "string", required: true },
              seconds: { type: "number", required: true },
            },
          },
        },
        /** From the deploy's start to the first phase seen, and from the last phase's end to ready. */
        headSeconds: { type: "number" },
        tailSeconds: { type: "number" },
        /** The deploy wave the host started in (lab.concurrency hosts a wave), and seconds after the run's first. */
        wave: { type: "number" },
        startOffsetSeconds: { type: "number" },
        /** Epoch seconds: kept LAB_TIMING_RETENTION_DAYS at most, then the table's TTL removes them. */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byIdentity: {
          pk: { field: "pk", composite: ["identity"] },
          sk: { field: "sk", composite: ["finishedAt", "hostId"] },
        },
      },
    },
    config,
  );

  /**
   * The receipt of a workshop's last teardown (shared/fleet/receipt.ts): what was removed, what is left and why
   * with the command that removes it, and the hosts' usage. The sweeper adds what it finds left later.
   */
  const receipt = new Entity(
    {
      model: { entity: "receipt", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        runId: { type: "string", required: true },
        provider: { type: "string", required: true },
        region: { type: "string" },
        endedAt: { type: "string", required: true },
        checkedAt: { type: "string", required: true },
        /** ReceiptItem[]: what the teardown (or, later, the sweeper) saw removed. */
        removed: { type: "any", required: true },
        /** ReceiptLeftover[]: what is still there, why, and the command that removes it. */
        left: { type: "any", required: true },
        /** Why the leftover check itself could not finish (the receipt is then incomplete). */
        checkError: { type: "string" },
        /** Why the teardown run failed, when it did (the receipt then lists what it did not get to). */
        failed: { type: "string" },
        /** ReceiptUsage: hosts, host-hours and their on-demand cost. */
        usage: { type: "any", required: true },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: [] },
        },
      },
    },
    config,
  );

  /**
   * A host's life that ended before its workshop's teardown: removed (a scale-down, a lower count) or its
   * machine replaced (a retry that found it gone). The teardown receipt counts its hours with the hosts still
   * there, then forgets it (shared/fleet/host-lives.ts).
   */
  const hostLife = new Entity(
    {
      model: { entity: "hostLife", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        hostId: { type: "string", required: true },
        providerId: { type: "string" },
        /** EC2's instance type (aws only), for the on-demand price. */
        instanceType: { type: "string" },
        createdAt: { type: "string", required: true },
        removedAt: { type: "string", required: true },
        why: { type: ["removed", "replaced"] as const, required: true },
      },
      indexes: {
        byWorkshop: {
          pk: { field: "pk", composite: ["workshop"] },
          sk: { field: "sk", composite: ["removedAt", "hostId"] },
        },
      },
    },
    config,
  );

  /**
   * A host's signing secret (shared/agent/host-secrets.ts): every call a host makes to labfleet (an enrolled
   * host's agent, or a host pushing its lab's progress) is signed with it. Sealed with the runtime's access key;
   * `previous` stays valid until `previousUntil` after a rotation, so a call in flight is not refused.
   */
  const hostSecret = new Entity(
    {
      model: { entity: "hostSecret", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        hostId: { type: "string", required: true },
        /** The sealed secret; absent once the host is forgotten (`forgottenAt`). */
        current: { type: "string" },
        previous: { type: "string" },
        previousUntil: { type: "string" },
        rotatedAt: { type: "string", required: true },
        /** An instructor asked for a new secret: the agent's next poll is told to rotate (cleared by the rotation). */
        rotateRequested: { type: "boolean" },
        /**
         * The workshop forgot the host (its teardown): the secret is gone and nothing it signs is accepted; this
         * mark only lets labfleet tell the host's agent, unsigned, to forget the workshop. Gone by TTL.
         */
        forgottenAt: { type: "string" },
        expiresAt: { type: "number" },
      },
      indexes: {
        byHost: {
          pk: { field: "pk", composite: ["workshop", "hostId"] },
          sk: { field: "sk", composite: [] },
        },
      },
    },
    config,
  );

  /** A signed call's nonce, kept while its timestamp is inside the signature window: a replay is refused. */
  const agentNonce = new Entity(
    {
      model: { entity: "agentNonce", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        hostId: { type: "string", required: true },
        nonce: { type: "string", required: true },
        /** Epoch seconds: DynamoDB's TTL removes the item once the window is past. */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byNonce: {
          pk: { field: "pk", composite: ["workshop", "hostId", "nonce"] },
          sk: { field: "sk", composite: [] },
        },
      },
    },
    config,
  );

  /**
   * A command queued for an enrolled host's agent (shared/agent/commands.ts): the agent takes it with its long
   * poll, runs it and posts the result. The script and stdin are sealed with the runtime's access key and removed
   * once the result is in; the item ends by TTL a day after it was queued. Sizes are bounded so an item stays
   * under DynamoDB's 400 KB.
   */
  const agentCommand = new Entity(
    {
      model: { entity: "agentCommand", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        hostId: { type: "string", required: true },
        commandId: { type: "string", required: true },
        state: { type: ["queued", "taken", "done", "cancelled"] as const, required: true },
        step: { type: "string" },
        /** Sealed: the bash script (env exports and the command). */
        script: { type: "string" },
        /** Sealed: the command's stdin, base64. */
        stdin: { type: "string" },
        timeoutMs: { type: "number", required: true },
        sudo: { type: "boolean" },
        exitCode: { type: "number" },
        /** Sealed: the output, as the agent sent it (within AGENT_STDOUT_MAX / AGENT_STDERR_MAX bytes). */
        stdout: { type: "string" },
        stderr: { type: "string" },
        timedOut: { type: "boolean" },
        truncated: { type: "boolean" },
        createdAt: { type: "string", required: true },
        takenAt: { type: "string" },
        finishedAt: { type: "string" },
        /** Epoch seconds (DynamoDB TTL). */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byHost: {
          pk: { field: "pk", composite: ["workshop", "hostId"] },
          sk: { field: "sk", composite: ["commandId"] },
        },
      },
    },
    config,
  );

  /**
   * A join token (shared/agent/join-tokens.ts): machines that present it may join the workshop as hosts. Only its
   * SHA-256 is kept (the token is shown once); `remaining` is decremented by a conditional write, so a token of N
   * uses lets exactly N machines join however many race. The key starts with the workshop's name (the token holds
   * it), so a student's own one-use token (BYOD) can be written from the portal's function.
   */
  const joinToken = new Entity(
    {
      model: { entity: "joinToken", version: "1", service },
      attributes: {
        workshop: { type: "string", required: true },
        hash: { type: "string", required: true },
        tokenId: { type: "string", required: true },
        uses: { type: "number", required: true },
        remaining: { type: "number", required: true },
        approve: { type: ["auto", "manual"] as const, required: true },
        /** ISO time the token stops working. */
        expiry: { type: "string", required: true },
        createdAt: { type: "string", required: true, readOnly: true },
        /** Who made it (actorName()). */
        by: { type: "string", required: true },
        revokedAt: { type: "string" },
        /** The hosts that joined with it, in order. */
        hostIds: { type: "list", items: { type: "string" } },
        /**
         * BYOD (`portal.enrollment: claim`): the student the token was given to on their lab join page, with what
         * their claim will hold (as a queue entry does): the machine that joins with it becomes their lab.
         */
        claimant: { type: "any" },
        /** Epoch seconds: the table's TTL removes the record a week after its expiry. */
        expiresAt: { type: "number", required: true },
      },
      indexes: {
        byToken: {
          pk: { field: "pk", composite: ["workshop", "hash"] },
          sk: { field: "sk", composite: [] },
        },
        byWorkshop: {
          index: "gsi1",
          pk: { field: "gsi1pk", composite: ["workshop"] },
          sk: { field: "gsi1sk", composite: ["tokenId"] },
        },
      },
    },
    config,
  );

  return {
    workshop,
    host,
    joinToken,
    hostSecret,
    agentNonce,
    agentCommand,
    hostLife,
    labTiming,
    run,
    execJob,
    execResult,
    schedule,
    hostKey,
    portal,
    portalCode,
    claim,
    claimEmail,
    claimLink,
    queueEntry,
    queueEmail,
    queueLink,
    joinLink,
    checkResult,
    checkPress,
    rateCounter,
    rateHold,
    session,
    apiToken,
    deviceLogin,
    event,
    receipt,
    rollout,
    rolloutHost,
  };
}

export type Entities = ReturnType<typeof entities>;

export function createStore(client: DynamoDBClient, table: string) {
  markStoreErrors(client);
  const doc = DynamoDBDocumentClient.from(client, { marshallOptions: { removeUndefinedValues: true } });
  const e = entities(doc, table);
  return { ...e, service: new Service(e), table, client, doc };
}

export type Store = ReturnType<typeof createStore>;
export type WorkshopItem = EntityItem<Entities["workshop"]>;
export type HostItem = EntityItem<Entities["host"]>;
export type RunItem = EntityItem<Entities["run"]>;
export type ExecJobItem = EntityItem<Entities["execJob"]>;
export type ExecResultItem = EntityItem<Entities["execResult"]>;
export type ScheduleItem = EntityItem<Entities["schedule"]>;
export type PortalItem = EntityItem<Entities["portal"]>;
export type ClaimItem = EntityItem<Entities["claim"]>;
export type ClaimEmailItem = EntityItem<Entities["claimEmail"]>;
export type QueueEntryItem = EntityItem<Entities["queueEntry"]>;
export type CheckResultItem = EntityItem<Entities["checkResult"]>;
export type SessionItem = EntityItem<Entities["session"]>;
export type ApiTokenItem = EntityItem<Entities["apiToken"]>;
export type DeviceLoginItem = EntityItem<Entities["deviceLogin"]>;
export type EventItem = EntityItem<Entities["event"]>;
export type ReceiptItem = EntityItem<Entities["receipt"]>;
export type HostLifeItem = EntityItem<Entities["hostLife"]>;
export type HostSecretItem = EntityItem<Entities["hostSecret"]>;
export type AgentCommandItem = EntityItem<Entities["agentCommand"]>;
export type JoinTokenItem = EntityItem<Entities["joinToken"]>;
export type JoinLinkItem = EntityItem<Entities["joinLink"]>;
export type HostKeyItem = EntityItem<Entities["hostKey"]>;
export type LabTimingItem = EntityItem<Entities["labTiming"]>;
export type RolloutItem = EntityItem<Entities["rollout"]>;
export type RolloutHostItem = EntityItem<Entities["rolloutHost"]>;
export type HostState = (typeof HOST_STATES)[number];
export type WorkshopState = (typeof WORKSHOP_STATES)[number];

// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Hono } from "hono";
import { z } from "zod";
import { checkCommand } from "../../shared/fleet/check-run.ts";
import { claimedAmong } from "../../shared/fleet/claimed.ts";
import {
  abortRollout,
  checkRollout,
  planRollout,
  RolloutOptions,
  type RolloutView,
  resumeRollout,
  rolloutStatus,
  startRollout,
} from "../../shared/fleet/rollout.ts";
import { isVisibleError, VisibleError } from "../../shared/runtime/errors.ts";
import { type Ctx, done, type Env, nameOf, page, viewer } from "./common.tsx";
import { hostList } from "./format.ts";
import { ConfirmPage } from "./views/layout.tsx";
import { CheckPage, RolloutConfirmMessage } from "./views/rollout.tsx";

/**
 * A workshop's rollouts and check mode from the console (the same domain functions as `labfleet rollout` and
 * `--check`): Check (what a rollout would do, changing nothing), Roll out (confirmed on a page that names the
 * claimed labs it would touch; with claimed labs, by typing the workshop's name), Resume, Abort (confirmed), and
 * Check for up, deploy and retry. Every form carries the session's CSRF field (checked in index.tsx).
 */

const Count = z
  .string()
  .max(20)
  .default("")
  .transform((t) => t.trim())
  .refine((t) => t === "" || (/^\d{1,4}$/.test(t) && Number(t) >= 1 && Number(t) <= 1000), {
    error: "expected a whole number from 1 to 1000",
  });

const RolloutFormFields = z.object({
  ref: z.string().max(300),
  canary: Count,
  batch: Count,
  includeClaimed: z.literal("yes").optional(),
  confirm: z.string().max(100).optional(),
});

const CheckFormFields = z.object({
  command: z.enum(["up", "deploy", "retry"], { error: "expected up, deploy or retry" }),
  hosts: z.string().max(4000).default(""),
  force: z.literal("yes").optional(),
});

/** The form's fields as the domain's options (its schema says what is wrong with the ref, with the field). */
async function rolloutForm(c: Ctx) {
  const f = RolloutFormFields.parse(await c.req.parseBody());
  const options = RolloutOptions.parse({
    ref: f.ref.trim(),
    ...(f.canary ? { canary: Number(f.canary) } : {}),
    ...(f.batch ? { batch: Number(f.batch) } : {}),
    includeClaimed: f.includeClaimed === "yes",
  });
  // What the confirmation posts again, as the form sent it.
  const fields = {
    ref: options.ref,
    ...(f.canary ? { canary: f.canary } : {}),
    ...(f.batch ? { batch: f.batch } : {}),
    ...(options.includeClaimed ? { includeClaimed: "yes" } : {}),
  };
  return { options, fields, confirm: f.confirm?.trim() };
}

/** The workshop's latest rollout, or nothing when it has had none (the page's rollout region). */
export async function shownRollout(name: string): Promise<RolloutView | undefined> {
  try {
    return await rolloutStatus(name);
  } catch (err) {
    if (isVisibleError(err) && err.code === "rollout.not_found") return undefined;
    throw err;
  }
}

export function rolloutRoutes(app: Hono<Env>) {
  app.post("/w/:name/rollout/check", async (c) => {
    const name = nameOf(c);
    const { options } = await rolloutForm(c);
    const report = await checkRollout(name, options);
    return page(
      c,
      <CheckPage
        viewer={viewer(c)}
        title={`Check: a rollout of ${name} to ${options.ref}`}
        report={report}
        back={`/console/w/${name}`}
      />,
    );
  });

  // Asked first, always: the page says how many labs, and names each claimed lab and its student. With claimed
  // labs, the workshop's name is typed; the plan is made again on the confirmed post, so a lab claimed meanwhile
  // is asked about before it is touched.
  app.post("/w/:name/rollout", async (c) => {
    const name = nameOf(c);
    const { options, fields, confirm } = await rolloutForm(c);
    await checkRollout(name, options); // the ref exists, the workshop has labs: as the start would check
    const plan = await planRollout(name, options);
    if (plan.hosts.length === 0)
      throw new VisibleError(
        "conflict",
        "rollout.nothing_to_do",
        `No lab of ${name} would be updated to ${options.ref}.`,
        plan.items.map((i) => ({ path: i.hostId, message: i.detail ?? i.action })),
      );
    const touchesClaimed = plan.hosts.some((h) => h.student !== null);
    const wanted = touchesClaimed ? name : "yes";
    if (confirm === wanted) {
      await startRollout(name, options);
      return done(c, name, "rollout");
    }
    // The labs left alone: the claimed ones (include-claimed is off) by student, the others with why.
    const left = plan.items.filter((i) => i.action === "skip");
    const claims = new Map(
      (
        await claimedAmong(
          name,
          left.map((i) => i.hostId),
        )
      ).map((cl) => [cl.lab, cl.student]),
    );
    const claimedLeft = options.includeClaimed
      ? []
      : left.flatMap((i) => {
          const student = claims.get(i.hostId);
          return student !== undefined && i.detail?.startsWith("claimed by")
            ? [{ hostId: i.hostId, student }]
            : [];
        });
    const skipped = left
      .filter((i) => !claimedLeft.some((cl) => cl.hostId === i.hostId))
      .map((i) => ({ hostId: i.hostId, detail: i.detail ?? "" }));
    const n = plan.hosts.length;
    const claimed = plan.hosts.filter((h) => h.student !== null).length;
    return page(
      c,
      <ConfirmPage
        viewer={viewer(c)}
        title={`Roll ${options.ref} out to ${n} ${n === 1 ? "lab" : "labs"}${claimed ? `, ${claimed} of them claimed` : ""}?`}
        message={
          <RolloutConfirmMessage
            name={name}
            ref={options.ref}
            hosts={plan.hosts}
            batch={plan.batch}
            includeClaimed={options.includeClaimed ?? false}
            claimedLeft={claimedLeft}
            skipped={skipped}
          />
        }
        action={`/console/w/${name}/rollout`}
        fields={fields}
        {...(touchesClaimed ? { typed: name } : {})}
        button={claimed ? `Update ${n} labs, ${claimed} claimed` : `Start the rollout`}
        buttonClass={claimed ? "danger" : ""}
        back={`/console/w/${name}`}
        error={
          confirm !== undefined && touchesClaimed
            ? `That is not the workshop's name: type ${name} exactly.`
            : undefined
        }
      />,
      confirm !== undefined && touchesClaimed ? 400 : 200,
    );
  });

  app.post("/w/:name/rollout/resume", async (c) => {
    const name = nameOf(c);
    await resumeRollout(name);
    return done(c, name, "rollout-resumed");
  });

  app.post("/w/:name/rollout/abort", async (c) => {
    const name = nameOf(c);
    const f = z.object({ confirm: z.string().max(100).optional() }).parse(await c.req.parseBody());
    if (f.confirm !== "yes") {
      const r = await rolloutStatus(name);
      if (r.state !== "running")
        throw new VisibleError("conflict", "rollout.not_running", `${name} has no rollout running.`);
      const building = r.hosts.filter((h) => h.state === "building").map((h) => h.hostId);
      const promoted = r.hosts.filter((h) => h.state === "promoted" || h.state === "updated").length;
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Abort the rollout of ${name} to ${r.ref}?`}
          message={
            <p id="abort-what">
              The rollout stops: no further lab is started.{" "}
              {building.length
                ? `The new hosts still building (${building.join(", ")}) are removed; those labs stay on their old ref. `
                : ""}
              {promoted
                ? `${promoted} ${promoted === 1 ? "lab" : "labs"} already promoted keep ${r.ref}. `
                : ""}
              Resume goes on with it later.
            </p>
          }
          action={`/console/w/${name}/rollout/abort`}
          button="Abort the rollout"
          back={`/console/w/${name}`}
        />,
      );
    }
    await abortRollout(name);
    return done(c, name, "rollout-aborted");
  });

  // Check for up, deploy and retry: the forms' Check buttons post their own fields here.
  app.post("/w/:name/check", async (c) => {
    const name = nameOf(c);
    const f = CheckFormFields.parse(await c.req.parseBody());
    const hosts = hostList(f.hosts);
    const report = await checkCommand(name, {
      command: f.command,
      force: f.force === "yes",
      ...(f.command === "deploy" && hosts.length ? { selection: { hosts } } : {}),
    });
    return page(
      c,
      <CheckPage
        viewer={viewer(c)}
        title={`Check: ${f.command} of ${name}`}
        report={report}
        back={`/console/w/${name}`}
      />,
    );
  });
}

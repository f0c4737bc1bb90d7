// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Hono } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { ExtendInput, extendWorkshop } from "../../shared/fleet/extend.ts";
import { notReadyProblem, setStudentAccess } from "../../shared/fleet/open-access.ts";
import { diagnose, startDeploy, startRetry } from "../../shared/fleet/ops.ts";
import { findReceipt, type Receipt } from "../../shared/fleet/receipt.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { planScale, scaleOffer, scaleUp } from "../../shared/fleet/scale.ts";
import {
  getWorkshop,
  listHosts,
  submitWorkshop,
  type WorkshopStatus,
  workshopStatus,
} from "../../shared/fleet/workshops.ts";
import { errorMessage, VisibleError } from "../../shared/runtime/errors.ts";
import { log } from "../../shared/runtime/logger.ts";
import { isStoreUnreachable } from "../../shared/store/unreachable.ts";
import { WORKSHOP_YAML_MAX_BYTES } from "../../shared/workshop/load.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { diagnoseArchive } from "../api/archive.ts";
import { statusOf } from "../api/errors.ts";
import { eventsAfter, recentEvents } from "./activity.ts";
import {
  askBeforeRebuildingClaimed,
  ConfirmForm,
  type Ctx,
  DeployForm,
  DiagnoseForm,
  done,
  type Env,
  ExtendForm,
  fragment,
  LiveQuery,
  live,
  nameOf,
  noticeOf,
  now,
  PageQuery,
  page,
  ScaleForm,
  viewer,
} from "./common.tsx";
import { labAccess, runRows, workshopRows, workshopView } from "./data.ts";
import { execAction, execCancel, execJobLive, execJobPage } from "./exec.tsx";
import { hostList } from "./format.ts";
import { shownRollout } from "./rollout-routes.tsx";
import { ReceiptRegion } from "./views/receipt.tsx";
import { RolloutRegion } from "./views/rollout.tsx";
import {
  AccessResultPage,
  ActivityRows,
  ConfirmPage,
  ErrorPage,
  FleetPager,
  FleetRows,
  FleetSummary,
  type LabAccess,
  NewWorkshopPage,
  portText,
  ResultPage,
  RunList,
  RunsPage,
  ScaleConfirmMessage,
  Summary,
  WorkshopPage,
  WorkshopRows,
  WorkshopsPage,
} from "./views.tsx";

/**
 * The receipt a workshop's page shows: the last teardown's, once the workshop is torn down, or when that
 * teardown failed and no run has started since.
 */
async function shownReceipt(s: WorkshopStatus): Promise<Receipt | undefined> {
  const last = s.runs[0];
  if (s.state !== "torn_down" && last?.kind !== "teardown") return undefined;
  const r = await findReceipt(s.name);
  return r && (s.state === "torn_down" || r.runId === last?.id) ? r : undefined;
}

/** The workshops list, a new workshop, one workshop's page with its fleet actions, and its runs. */
export function workshopRoutes(app: Hono<Env>) {
  // --- workshops ------------------------------------------------------------------------------------------
  app.get("/", async (c) =>
    page(
      c,
      <WorkshopsPage viewer={viewer(c)} rows={await workshopRows()} now={now()} notice={noticeOf(c)} />,
    ),
  );
  app.get("/live", async (c) =>
    live(c, { "live-workshops": <WorkshopRows rows={await workshopRows()} now={now()} /> }),
  );

  app.get("/new", (c) => page(c, <NewWorkshopPage viewer={viewer(c)} />));
  app.post("/new", async (c) => {
    const body = await c.req.parseBody();
    const file = body.file;
    const pasted = typeof body.yaml === "string" ? body.yaml : "";
    // A chosen file wins; browsers send a text area's lines with CRLF.
    const yaml = (file instanceof File && file.size > 0 ? await file.text() : pasted).replace(/\r\n?/g, "\n");
    const baseDir = typeof body.baseDir === "string" ? body.baseDir.trim() : "";
    const again = (status: ContentfulStatusCode, message: string, errors: VisibleError["details"] = []) =>
      page(
        c,
        <NewWorkshopPage
          viewer={viewer(c)}
          yaml={yaml}
          baseDir={baseDir}
          message={message}
          errors={errors}
        />,
        status,
      );
    if (!yaml.trim()) return again(400, "Paste workshop.yaml or choose the file.");
    if (Buffer.byteLength(yaml) > WORKSHOP_YAML_MAX_BYTES)
      return again(413, "workshop.yaml is too large (at most 1 MiB).");
    if (baseDir && !baseDir.startsWith("/"))
      return again(400, "The folder of workshop.yaml must be an absolute path.", [
        { path: "baseDir", message: "expected an absolute folder, such as /home/me/workshop" },
      ]);
    try {
      const r = await submitWorkshop(yaml, baseDir || undefined);
      return done(c, r.name, r.created ? "created" : "updated");
    } catch (err) {
      if (!(err instanceof VisibleError)) throw err;
      return again(statusOf(err.kind), err.message, err.details);
    }
  });

  // --- one workshop: hosts and fleet actions ----------------------------------------------------------------
  app.get("/w/:name", async (c) => {
    const name = nameOf(c);
    const { labs } = PageQuery.parse(c.req.query());
    const [v, activity] = await Promise.all([workshopView(name, labs), recentEvents(name)]);
    const scale = v.summary.state === "draft" ? undefined : await scaleOffer(name);
    // The teardown receipt, once the workshop is torn down (web/console/views/receipt.tsx).
    const receipt = await shownReceipt(v.summary);
    // The latest rollout, live (web/console/rollout-routes.tsx).
    const rollout = await shownRollout(name);
    return page(
      c,
      <WorkshopPage
        viewer={viewer(c)}
        {...v}
        labs={labs}
        scale={scale}
        activity={activity}
        notice={noticeOf(c)}
        receipt={receipt}
        rollout={rollout}
      />,
    );
  });
  // The live regions, and the events after the page's newest (`?after=`): the script adds their rows at
  // the top of the activity list and asks from the returned `last` next time.
  app.get("/w/:name/live", async (c) => {
    const { after, labs } = LiveQuery.parse(c.req.query());
    const name = nameOf(c);
    const [v, news] = await Promise.all([workshopView(name, labs), eventsAfter(name, after)]);
    const newestFirst = [...news.events].reverse();
    return live(
      c,
      {
        "live-summary": <Summary summary={v.summary} activeRun={v.activeRun} now={v.now} />,
        "live-fleet": <FleetSummary fleet={v.fleet} />,
        "live-hosts": <FleetRows fleet={v.fleet} />,
        "live-pager": <FleetPager fleet={v.fleet} base={`/console/w/${name}`} />,
        "live-receipt": (
          <ReceiptRegion
            receipt={await shownReceipt(v.summary)}
            teardown={v.activeRun?.kind === "teardown" ? v.activeRun : undefined}
            hosts={v.summary.hosts.total}
          />
        ),
        "live-rollout": (
          <RolloutRegion
            base={`/console/w/${name}`}
            csrf={viewer(c).csrf}
            rollout={await shownRollout(name)}
          />
        ),
      },
      {
        activity: {
          events: news.events,
          last: news.last,
          html: await fragment(<ActivityRows events={newestFirst} placeholder={false} />),
        },
      },
    );
  });
  app.post("/w/:name/up", async (c) => {
    const name = nameOf(c);
    await startRun(name, "up");
    return done(c, name, "up");
  });
  app.post("/w/:name/deploy", async (c) => {
    const name = nameOf(c);
    const f = DeployForm.parse(await c.req.parseBody());
    const hosts = hostList(f.hosts);
    const force = f.force === "yes";
    const run = await askBeforeRebuildingClaimed(c, name, "deploy", f.confirm === "yes", {
      fields: { hosts: f.hosts, ...(force ? { force: "yes" } : {}) },
      start: (rebuildClaimed) => startDeploy(name, hosts.length ? { hosts } : {}, { force, rebuildClaimed }),
    });
    return run instanceof Response ? run : done(c, name, "deploy");
  });
  // --- Run a command on the selected hosts (labfleet exec): web/console/exec.tsx -----------------------
  app.post("/w/:name/exec", async (c) =>
    execAction(c, nameOf(c), viewer(c), (node, status) => page(c, node, status)),
  );
  app.get("/w/:name/exec/:jobId", async (c) => execJobPage(c, nameOf(c), viewer(c), (node) => page(c, node)));
  app.get("/w/:name/exec/:jobId/live", async (c) => execJobLive(c, nameOf(c), viewer(c)));
  app.post("/w/:name/exec/:jobId/cancel", async (c) => execCancel(c, nameOf(c)));
  app.post("/w/:name/retry", async (c) => {
    const name = nameOf(c);
    const f = ConfirmForm.parse(await c.req.parseBody());
    const r = await askBeforeRebuildingClaimed(c, name, "retry", f.confirm === "yes", {
      fields: {},
      start: (rebuildClaimed) => startRetry(name, {}, { rebuildClaimed }),
    });
    return r instanceof Response ? r : done(c, name, r.run ? "retry" : "retry-none");
  });
  app.post("/w/:name/diagnose", async (c) => {
    const name = nameOf(c);
    const f = DiagnoseForm.parse(await c.req.parseBody());
    const d = await diagnose(name, {}, { allSelected: f.all === "yes" });
    // One part only (a download cannot ask for the next): its index.json says how to collect the rest.
    const part = await diagnoseArchive(d);
    return c.body(new Uint8Array(part.archive), 200, {
      "Content-Type": "application/gzip",
      "Content-Disposition": `attachment; filename="${part.name}.tar.gz"`,
      ...(part.next ? { "X-Labfleet-Diagnose-Next": part.next } : {}),
    });
  });
  // Scale up: the form's count, confirmed on a page that says what it adds (and who is waiting), then started.
  app.post("/w/:name/scale", async (c) => {
    const name = nameOf(c);
    const f = ScaleForm.parse(await c.req.parseBody());
    const count = /^\s*\d{1,3}\s*$/.test(f.count) ? Number(f.count) : Number.NaN;
    if (f.confirm !== "yes") {
      const plan = await planScale(name, count);
      const { provider } = await scaleOffer(name);
      const n = plan.add.length;
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Scale ${name} up to ${plan.to} hosts?`}
          message={<ScaleConfirmMessage plan={plan} provider={provider} />}
          action={`/console/w/${name}/scale`}
          fields={{ count: String(plan.to) }}
          button={`Add ${n} ${n === 1 ? "lab" : "labs"}`}
          buttonClass=""
          back={`/console/w/${name}`}
        />,
      );
    }
    await scaleUp(name, count);
    return done(c, name, "scale");
  });
  app.post("/w/:name/extend", async (c) => {
    const name = nameOf(c);
    const f = ExtendForm.parse(await c.req.parseBody());
    const { hours } = ExtendInput.parse({ hours: f.hours.trim() === "" ? Number.NaN : Number(f.hours) });
    const r = await extendWorkshop(name, hours);
    if (r.ok) return done(c, name, "extended");
    const problems = [
      ...(r.schedule.result === "error" ? [`schedule: ${r.schedule.detail ?? "not moved"}`] : []),
      ...(r.provider.result === "error" ? [`provider: ${r.provider.detail ?? "not moved"}`] : []),
      ...r.hosts.filter((h) => h.result === "error").map((h) => `${h.hostId}: ${h.detail ?? "not moved"}`),
    ];
    return page(
      c,
      <ResultPage viewer={viewer(c)} title="Extended, with problems" back={`/console/w/${name}`}>
        <p>
          The teardown now happens at {r.expiry}, but these parts still end at the old time (
          {r.previousExpiry}):
        </p>
        <ul>
          {problems.map((p) => (
            <li>{p}</li>
          ))}
        </ul>
      </ResultPage>,
      502,
    );
  });
  app.get("/w/:name/teardown", async (c) => {
    const name = nameOf(c);
    const s = await workshopStatus(name);
    return page(c, <TeardownConfirm c={c} name={name} hosts={s.hosts.total} />);
  });
  app.post("/w/:name/teardown", async (c) => {
    const name = nameOf(c);
    const f = ConfirmForm.parse(await c.req.parseBody());
    if ((f.confirm ?? "").trim() !== name) {
      const s = await workshopStatus(name);
      return page(
        c,
        <TeardownConfirm
          c={c}
          name={name}
          hosts={s.hosts.total}
          error={`That is not the workshop's name: type ${name} exactly.`}
        />,
        400,
      );
    }
    await startRun(name, "teardown");
    return done(c, name, "teardown");
  });

  // --- student access to the lab UIs (labfleet open-access [--close]) -----------------------------------
  // Opening puts the lab UI ports on the internet: a confirmation page first, which already refuses while a
  // host is not ready (setStudentAccess checks again). The provider's message is the answer (with the
  // workshop's own security groups, what to open by hand), so it is rendered, not redirected to a notice.
  app.post("/w/:name/open-access", async (c) => {
    const name = nameOf(c);
    const f = ConfirmForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes") {
      const access = labAccess((await getWorkshop(name)).spec as Workshop);
      // Without a firewall to open, setStudentAccess below gives the reason.
      if (access.kind === "firewall") {
        const hosts = await listHosts(name);
        const problem = notReadyProblem(name, hosts);
        if (problem) return accessRefused(c, name, true, problem);
        const live = hosts.filter((h) => h.state !== "torn_down").length;
        return page(c, <OpenAccessConfirm c={c} name={name} access={access} hosts={live} />);
      }
    }
    return changeAccess(c, name, true);
  });
  app.post("/w/:name/close-access", async (c) => changeAccess(c, nameOf(c), false));

  // --- runs ---------------------------------------------------------------------------------------------------
  app.get("/w/:name/runs", async (c) => {
    const name = nameOf(c);
    return page(c, <RunsPage viewer={viewer(c)} name={name} runs={await runRows(name)} />);
  });
  app.get("/w/:name/runs/live", async (c) =>
    live(c, { "live-runs": <RunList runs={await runRows(nameOf(c))} /> }),
  );
}

export function TeardownConfirm(props: { c: Ctx; name: string; hosts: number; error?: string }) {
  const { c, name } = props;
  return (
    <ConfirmPage
      viewer={viewer(c)}
      title={`Tear down ${name}?`}
      message={
        <p>
          All {props.hosts} hosts are removed with their labs, and the claim portal with every claim and
          personal link. Students lose their labs. This cannot be undone.
        </p>
      }
      action={`/console/w/${name}/teardown`}
      typed={name}
      button={`Tear down ${name}`}
      back={`/console/w/${name}`}
      error={props.error}
    />
  );
}

/** Opens or closes the lab UIs, answering with the provider's message or the refusal (never a 500). */
export async function changeAccess(c: Ctx, name: string, open: boolean) {
  try {
    const view = await setStudentAccess(name, open);
    return page(c, <AccessResultPage viewer={viewer(c)} view={view} />);
  } catch (err) {
    return accessRefused(c, name, open, err);
  }
}

export function accessRefused(c: Ctx, name: string, open: boolean, err: unknown) {
  if (isStoreUnreachable(err)) throw err; // not the provider's doing: the error page says so, with a 503
  const verb = open ? "opened" : "closed";
  const back = `/console/w/${name}`;
  if (err instanceof VisibleError) {
    const notReady = err.code === "open_access.not_ready";
    return page(
      c,
      <ErrorPage
        viewer={viewer(c)}
        title={`Lab access was not ${verb}`}
        message={err.message}
        // A host list: student-02: expected ready, got deploying (phase build).
        details={err.details.map((d) => ({ ...d, path: d.path.replace(/^hosts\./, "") }))}
        hint={
          notReady
            ? "Open lab access once every lab is ready: the Hosts table follows them live, and Retry failed hosts rebuilds the ones that failed."
            : undefined
        }
        back={back}
        backLabel={`Back to ${name}`}
      />,
      statusOf(err.kind),
    );
  }
  // The provider's call failed (an EC2 error, say): said as such, never an internal error page.
  const message = errorMessage(err);
  log.warn(`console: lab access not ${verb}`, { workshop: name, error: message });
  return page(
    c,
    <ErrorPage
      viewer={viewer(c)}
      title={`Lab access was not ${verb}`}
      message={`The provider could not change the security group: ${message}`}
      hint="Part of the change may have happened before the error. Trying again is safe: both actions leave the rules as asked whatever they were."
      back={back}
      backLabel={`Back to ${name}`}
    />,
    502,
  );
}

export function OpenAccessConfirm(props: {
  c: Ctx;
  name: string;
  access: Extract<LabAccess, { kind: "firewall" }>;
  hosts: number;
}) {
  const { name, access } = props;
  const ready = props.hosts === 1 ? "The host is ready." : `All ${props.hosts} hosts are ready.`;
  return (
    <ConfirmPage
      viewer={viewer(props.c)}
      title={`Open the lab UIs of ${name} to the internet?`}
      message={
        access.byo ? (
          <p>
            {ready} This workshop uses its own security groups (provider.security_group_ids): labfleet changes
            none of them, and the next page says what to open by hand ({portText(access.ports)} from 0.0.0.0/0
            and ::/0).
          </p>
        ) : (
          <p>
            {ready} {props.hosts === 1 ? "Its" : "Their"} lab UIs ({portText(access.ports)}) become reachable
            from anywhere on the internet (0.0.0.0/0 and ::/0), by anyone who has a host's address, not only
            your students. Port 22 is never opened. Close lab access when the workshop ends.
          </p>
        )
      }
      action={`/console/w/${name}/open-access`}
      button="Open lab access"
      back={`/console/w/${name}`}
    />
  );
}

// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Context, Hono } from "hono";
import { getWorkshop } from "../../shared/fleet/workshops.ts";
import {
  closePortal,
  exportClaims,
  openPortal,
  type PortalView,
  publishPortal,
  reassign,
  releaseLab,
  revokeEmail,
  rotateCode,
  unlockEmail,
} from "../../shared/portal/portal.ts";
import { unqueueEmail } from "../../shared/portal/queue.ts";
import { unblock } from "../../shared/portal/rate-limit.ts";
import { swapLab } from "../../shared/portal/swap.ts";
import { studentUrl } from "../portal-url.ts";
import {
  ConfirmForm,
  done,
  type Env,
  LabForm,
  live,
  nameOf,
  noticeOf,
  page,
  ReassignForm,
  RevokeForm,
  UnblockForm,
  viewer,
} from "./common.tsx";
import { claimOf, portalData } from "./data.ts";
import {
  BoardItems,
  ClaimRows,
  ConfirmPage,
  HeldBackSection,
  PortalPage,
  PortalSummary,
  ResultPage,
  SlideBody,
  SlidePage,
  WaitingRows,
} from "./views.tsx";

/** A workshop's Portal tab: the claim portal's state, its slide, and the instructor's actions on claims and the line. */
export function portalRoutes(app: Hono<Env>) {
  // --- the claim portal -------------------------------------------------------------------------------------
  app.get("/w/:name/portal", async (c) =>
    page(c, <PortalPage viewer={viewer(c)} data={await portalData(nameOf(c))} notice={noticeOf(c)} />),
  );
  app.get("/w/:name/portal/live", async (c) => {
    const data = await portalData(nameOf(c));
    return live(c, {
      "live-portal": <PortalSummary data={data} />,
      "live-board": <BoardItems labs={data.board.labs} />,
      "live-claims": <ClaimRows data={data} csrf={viewer(c).csrf} />,
      "live-waiting": <WaitingRows data={data} csrf={viewer(c).csrf} />,
      "live-held": <HeldBackSection data={data} csrf={viewer(c).csrf} />,
    });
  });
  // The slide: the portal's address as students reach it (the portal's own URL when it has one, else this
  // site's, which serves the portal).
  const slideUrl = (c: Context, info: PortalView | undefined) => studentUrl(c, info?.path ?? "/");
  const slideInfo = async (name: string) => (await portalData(name)).info;
  app.get("/w/:name/portal/slide", async (c) => {
    const name = nameOf(c);
    const info = await slideInfo(name);
    return page(c, <SlidePage viewer={viewer(c)} name={name} url={slideUrl(c, info)} info={info} />);
  });
  app.get("/w/:name/portal/slide/live", async (c) => {
    const info = await slideInfo(nameOf(c));
    return live(c, { "live-slide": <SlideBody url={slideUrl(c, info)} info={info} /> });
  });
  app.post("/w/:name/portal/open", async (c) => {
    const name = nameOf(c);
    await openPortal(name);
    return done(c, name, "portal-open", "/portal");
  });
  app.post("/w/:name/portal/close", async (c) => {
    const name = nameOf(c);
    await closePortal(name);
    return done(c, name, "portal-closed", "/portal");
  });
  app.post("/w/:name/portal/publish", async (c) => {
    const name = nameOf(c);
    await publishPortal(name);
    return done(c, name, "portal-published", "/portal");
  });
  app.post("/w/:name/portal/rotate-code", async (c) => {
    const name = nameOf(c);
    const f = ConfirmForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes")
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`New code for ${name}?`}
          message={
            <p>
              The current code stops working: every student on the board must type the new one. Students who
              claimed a lab keep it, and their personal links keep working.
            </p>
          }
          action={`/console/w/${name}/portal/rotate-code`}
          button="Make a new code"
          back={`/console/w/${name}/portal`}
        />,
      );
    await rotateCode(name);
    return done(c, name, "code-rotated", "/portal");
  });
  app.post("/w/:name/portal/release", async (c) => {
    const name = nameOf(c);
    const f = LabForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes") {
      const claim = await claimOf(name, f.lab);
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Release ${f.lab}?`}
          message={
            <p>
              {claim.name} loses lab {f.lab}: their personal link stops working, and the lab is free for
              someone else to claim. The lab itself is not rebuilt.
            </p>
          }
          action={`/console/w/${name}/portal/release`}
          fields={{ lab: f.lab }}
          button={`Release ${f.lab}`}
          back={`/console/w/${name}/portal`}
        />,
      );
    }
    await releaseLab(name, f.lab);
    return done(c, name, "released", "/portal");
  });
  app.post("/w/:name/portal/revoke", async (c) => {
    const name = nameOf(c);
    const f = RevokeForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes")
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title="Revoke this student's lab?"
          message={
            <p>
              The lab claimed with {f.email} is released: its personal link stops working and the lab is free
              again.
            </p>
          }
          action={`/console/w/${name}/portal/revoke`}
          fields={{ email: f.email }}
          button="Revoke"
          back={`/console/w/${name}/portal`}
        />,
      );
    await revokeEmail(name, f.email);
    return done(c, name, "revoked", "/portal");
  });
  app.post("/w/:name/portal/swap", async (c) => {
    const name = nameOf(c);
    const f = LabForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes") {
      const [claim, data] = await Promise.all([claimOf(name, f.lab), portalData(name)]);
      const to = data.free.at(-1);
      const why = data.failing[f.lab];
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Swap ${claim.name}'s lab?`}
          message={
            <>
              {f.lab in data.failing ? (
                <p>
                  Lab {f.lab} is failing its health check{why ? ":" : "."}
                  {why ? <pre class="error">{why}</pre> : null}
                </p>
              ) : null}
              <p>
                {to
                  ? `${claim.name} moves from ${f.lab} to ${to}, the highest-numbered free ready lab. `
                  : `No lab is free right now: the swap will be refused and nothing changes. `}
                Their personal link and cookie stay the same and open the new lab; nothing on the old lab is
                kept. Lab {f.lab} is then rebuilt and returns to the pool when it is ready.
              </p>
            </>
          }
          action={`/console/w/${name}/portal/swap`}
          fields={{ lab: f.lab }}
          button={to ? `Swap to ${to}` : "Swap"}
          back={`/console/w/${name}/portal`}
        />,
      );
    }
    const r = await swapLab(name, { hostId: f.lab });
    return done(c, name, r.rebuildRunId ? "swapped" : "swapped-no-rebuild", "/portal");
  });

  app.post("/w/:name/portal/unqueue", async (c) => {
    const name = nameOf(c);
    const f = RevokeForm.parse(await c.req.parseBody());
    await unqueueEmail(name, f.email);
    return done(c, name, "unqueued", "/portal");
  });
  app.post("/w/:name/portal/unlock", async (c) => {
    const name = nameOf(c);
    const f = LabForm.parse(await c.req.parseBody());
    await unlockEmail(name, (await claimOf(name, f.lab)).email);
    return done(c, name, "unlocked", "/portal");
  });
  app.post("/w/:name/portal/unblock", async (c) => {
    const name = nameOf(c);
    await getWorkshop(name);
    const f = UnblockForm.parse(await c.req.parseBody());
    const { addresses } = await unblock(f.all ? { all: true } : { address: f.address ?? "" }, name);
    return done(c, name, addresses.length ? "unblocked" : "unblock-none", "/portal");
  });
  app.post("/w/:name/portal/reassign", async (c) => {
    const name = nameOf(c);
    const f = ReassignForm.parse(await c.req.parseBody());
    const claim = await claimOf(name, f.lab);
    const back = `/console/w/${name}/portal`;
    if (f.confirm !== "yes")
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Move ${claim.name} to ${f.to}?`}
          message={
            <p>
              {claim.name} moves from {f.lab} to {f.to} and keeps their PIN. Their old personal link stops
              working; you get the new one to give them.
            </p>
          }
          action={`/console/w/${name}/portal/reassign`}
          fields={{ lab: f.lab, to: f.to }}
          button={`Move to ${f.to}`}
          back={back}
        />,
      );
    const r = await reassign(name, claim.email, f.to);
    const link = `${new URL(c.req.url).origin}/l/${r.token}`;
    return page(
      c,
      <ResultPage viewer={viewer(c)} title={`${claim.name} now has ${r.lab}`} back={back}>
        <p>Give them their new personal link (it is shown only here, once):</p>
        <p>
          <code id="new-link">{link}</code>
        </p>
      </ResultPage>,
    );
  });
  app.get("/w/:name/portal/export", async (c) => {
    const name = nameOf(c);
    return c.body(await exportClaims(name), 200, {
      "Content-Type": "text/csv; charset=utf-8",
      "Content-Disposition": `attachment; filename="${name}-claims.csv"`,
    });
  });
}

// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import { raw } from "hono/html";
import { renderSVG } from "uqr";
import type { PortalView } from "../../../shared/portal/portal.ts";
import { Layout, Tabs, type Viewer } from "./layout.tsx";

/**
 * The portal's address, its code and a QR code of the address, large enough to project: what students read
 * from the slide. The QR code is an SVG drawn on the server (no script), and carries only the address; the code
 * is typed, so a photo of the QR code alone does not let anyone in.
 */
export function qrSvg(url: string): string {
  // ecc M: a projected code is read from afar and at an angle; a border of 4 modules is the quiet zone the
  // standard asks for.
  return renderSVG(url, { ecc: "M", border: 4, pixelSize: 10 });
}

export function SlidePage(props: {
  viewer: Viewer;
  name: string;
  url: string;
  info: PortalView | undefined;
}) {
  const { name, url, info } = props;
  const base = `/console/w/${name}/portal`;
  return (
    <Layout title={`${name}: slide`} viewer={props.viewer} live={`${base}/slide/live`}>
      <Tabs name={name} current="portal" />
      <h1 class="sr-only">{name}: the portal's address for the room</h1>
      <p class="hint">
        Show this page on the projector. Students scan the code or type the address, then enter the workshop
        code. <a href={base}>Back to the portal</a>
      </p>
      <section class="slide" aria-label="What students type">
        <div id="live-slide" aria-live="polite">
          <SlideBody url={url} info={info} />
        </div>
      </section>
    </Layout>
  );
}

/** The part that changes: a new code replaces the old one on the projected page within seconds. */
export function SlideBody(props: { url: string; info: PortalView | undefined }) {
  const { url, info } = props;
  if (!info)
    return (
      <p class="slide-note">
        The portal has not been opened yet: open claiming or publish the board, and the code appears here.
      </p>
    );
  return (
    <div class="slide-grid">
      <figure class="slide-qr" aria-label={`QR code of ${url}`}>
        {raw(qrSvg(url))}
      </figure>
      <div class="slide-text">
        <p class="slide-label">Go to</p>
        <p class="slide-url">{url}</p>
        <p class="slide-label">Enter the code</p>
        <p class="slide-code" data-testid="slide-code">
          {info.code}
        </p>
        {info.state === "closed" ? <p class="slide-note">Claiming is closed.</p> : null}
        {info.state === "published" ? (
          <p class="slide-note">The board is open; claiming starts soon.</p>
        ) : null}
      </div>
    </div>
  );
}

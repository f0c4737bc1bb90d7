// The demo lab's web page: a small server on 127.0.0.1, on a port the system picks (so hosts never collide),
// behind the user and password the setup wrote to $LABFLEET_ACCESS (HTTP basic auth), which is what the
// student's lab page shows. Node only. It writes its port to state/port and its pid to state/server.pid,
// and ends by itself once its host's folder is gone (the host was torn down).
import { timingSafeEqual } from "node:crypto";
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";

const access = process.env.LABFLEET_ACCESS ?? "";
const host = process.env.LABFLEET_HOST_ID ?? "demo";
const home = process.env.HOME ?? process.cwd();

/** The lab's credentials, read at each request: the setup writes the access file once the port is known. */
function credentials() {
  try {
    const c = JSON.parse(readFileSync(access, "utf8")).credentials ?? {};
    return typeof c.user === "string" && typeof c.password === "string" ? c : undefined;
  } catch {
    return undefined;
  }
}

function same(a, b) {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function authorized(header) {
  const c = credentials();
  if (!c || !header?.startsWith("Basic ")) return false;
  const text = Buffer.from(header.slice(6), "base64").toString("utf8");
  const i = text.indexOf(":");
  return i > 0 && same(text.slice(0, i), c.user) && same(text.slice(i + 1), c.password);
}

const html = (s) => s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

const server = createServer((req, res) => {
  res.setHeader("Cache-Control", "no-store");
  if (req.url === "/healthz") {
    res.writeHead(200, { "Content-Type": "text/plain" }).end("ok\n");
    return;
  }
  if (!authorized(req.headers.authorization)) {
    res
      .writeHead(401, {
        "WWW-Authenticate": `Basic realm="demo lab ${host}", charset="UTF-8"`,
        "Content-Type": "text/plain",
      })
      .end("This demo lab needs the user and password shown on your lab page.\n");
    return;
  }
  const service = existsSync("state/service.txt") ? readFileSync("state/service.txt", "utf8").trim() : "";
  res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" }).end(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Demo lab ${html(host)}</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 2rem auto; padding: 0 1rem">
<h1>Your demo lab: ${html(host)}</h1>
<p>You are signed in: this page is served by your own lab host, behind the credentials on your lab page.</p>
<p>${html(service)}</p>
<p>A real lab would serve its application here (a cluster's dashboard, a notebook, a vulnerable app).</p>
</body></html>
`);
});

server.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  writeFileSync("state/server.pid", `${process.pid}\n`);
  writeFileSync("state/port.tmp", `${port}\n`);
  renameSync("state/port.tmp", "state/port"); // whole or absent: the setup waits for it
});

// The host's folder gone means the host was torn down: nothing is left to serve.
setInterval(() => {
  if (!existsSync(home) || !existsSync("state")) process.exit(0);
}, 1000).unref();

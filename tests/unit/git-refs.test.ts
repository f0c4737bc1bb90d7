import { afterEach, describe, expect, it } from "vitest";
import {
  checkRef,
  httpRepo,
  infoRefsUrl,
  lsRefsRequest,
  parseAdvertisement,
  parseDumbInfoRefs,
  parseInfoRefs,
  parseLsRefs,
  pktLine,
  readPktLines,
  redactUrl,
} from "../../shared/fleet/git.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { parseWorkshopYaml } from "../../shared/workshop/load.ts";

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array) => new TextDecoder().decode(b);
/** A pkt-line stream from lines; "0000"/"0001" are written as they are. */
const stream = (...lines: string[]) =>
  bytes(lines.map((l) => (/^000[0-2]$/.test(l) ? l : text(pktLine(l)))).join(""));

const A = "95dcfa3633004da0049d3d0fa03f80589cbcaf31";
const B = "d049f6c27a2244e12041955e262a404c7faba355";
const C = "2cb58b79488a98d2721cea644875a8dd0026b115";
const D = "a3c2e2402b99163d1d59756e5f207ae21cccba4c";
const ZERO = "0".repeat(40);

function spec(source: string) {
  return parseWorkshopYaml(
    `name: t\nlab:\n  source: ${JSON.stringify(source)}\n  setup: "true"\nprovider:\n  type: local\n  count: 1\n`,
  );
}

async function rejection(p: Promise<unknown>): Promise<VisibleError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(VisibleError);
  return err as VisibleError;
}

describe("pkt-line", () => {
  it("splits data lines and the flush, delimiter and response-end packets", () => {
    const lines = readPktLines(bytes("0006a\n0000000Aabcdef000100020005x"));
    expect(lines.map((l) => (l.kind === "data" ? text(l.data) : l.kind))).toEqual([
      "a\n",
      "flush",
      "abcdef",
      "delim",
      "response-end",
      "x",
    ]);
  });

  it("counts the four length bytes in the length", () => {
    expect(text(pktLine("# service=git-upload-pack\n"))).toBe("001e# service=git-upload-pack\n");
    expect(text(pktLine("command=ls-refs\n"))).toBe("0014command=ls-refs\n");
  });

  it("refuses a bad or impossible length and a truncated line", () => {
    expect(() => readPktLines(bytes("zzzzabc"))).toThrow(/bad length "zzzz"/);
    expect(() => readPktLines(bytes("0003"))).toThrow(/bad length 0003/);
    expect(() => readPktLines(bytes("fff1abc"))).toThrow(/bad length/);
    expect(() => readPktLines(bytes("0010abc"))).toThrow(/truncated/);
    expect(() => readPktLines(bytes("00"))).toThrow(/truncated/);
  });
});

describe("smart ref advertisement", () => {
  it("reads the example of gitprotocol-http: service line, capabilities after NUL, peeled tags", () => {
    const ad = parseAdvertisement(
      stream(
        "# service=git-upload-pack\n",
        "0000",
        `${A} refs/heads/maint\0multi_ack side-band-64k symref=HEAD:refs/heads/master\n`,
        `${B} refs/heads/master\n`,
        `${C} refs/tags/v1.0\n`,
        `${D} refs/tags/v1.0^{}\n`,
        "0000",
      ),
    );
    expect(ad.protocol).toBe("v0");
    expect(ad.capabilities).toEqual(["multi_ack", "side-band-64k", "symref=HEAD:refs/heads/master"]);
    expect(ad.refs).toEqual([
      { name: "refs/heads/maint", oid: A },
      { name: "refs/heads/master", oid: B },
      { name: "refs/tags/v1.0", oid: C, peeled: D },
    ]);
  });

  it("accepts lines without their trailing LF", () => {
    const ad = parseAdvertisement(stream("# service=git-upload-pack", "0000", `${A} HEAD\0agent=x`, "0000"));
    expect(ad.refs).toEqual([{ name: "HEAD", oid: A }]);
    expect(ad.capabilities).toEqual(["agent=x"]);
  });

  it("reads an empty repository's capabilities^{} line as no refs", () => {
    const ad = parseAdvertisement(
      stream("# service=git-upload-pack\n", "0000", `${ZERO} capabilities^{}\0report-status\n`, "0000"),
    );
    expect(ad.refs).toEqual([]);
    expect(ad.capabilities).toEqual(["report-status"]);
  });

  it("skips a version 1 line and a shallow repository's shallow lines", () => {
    const ad = parseAdvertisement(
      stream(
        "# service=git-upload-pack\n",
        "0000",
        "version 1\n",
        `${A} HEAD\0shallow\n`,
        `${A} refs/heads/main\n`,
        `shallow ${B}\n`,
        "0000",
      ),
    );
    expect(ad.protocol).toBe("v1");
    expect(ad.refs.map((r) => r.name)).toEqual(["HEAD", "refs/heads/main"]);
  });

  it("reads SHA-256 object ids", () => {
    const long = "ab".repeat(32);
    const ad = parseAdvertisement(
      stream(
        "# service=git-upload-pack\n",
        "0000",
        `${long} refs/heads/main\0object-format=sha256\n`,
        "0000",
      ),
    );
    expect(ad.refs).toEqual([{ name: "refs/heads/main", oid: long }]);
  });

  it("recognises a protocol v2 capability advertisement, with or without the service line", () => {
    const caps = [
      "version 2\n",
      "agent=git/2.39.5\n",
      "ls-refs=unborn\n",
      "fetch=shallow\n",
      "object-format=sha1\n",
    ];
    for (const body of [
      stream(...caps, "0000"),
      stream("# service=git-upload-pack\n", "0000", ...caps, "0000"),
    ]) {
      const ad = parseAdvertisement(body);
      expect(ad.protocol).toBe("v2");
      expect(ad.refs).toEqual([]);
      expect(ad.capabilities).toEqual([
        "agent=git/2.39.5",
        "ls-refs=unborn",
        "fetch=shallow",
        "object-format=sha1",
      ]);
    }
  });

  it("reports an ERR packet with the server's message", () => {
    expect(() => parseAdvertisement(stream("ERR access denied\n"))).toThrow(
      "the server answered: access denied",
    );
    expect(() =>
      parseAdvertisement(stream("# service=git-upload-pack\n", "0000", "ERR repository disabled\n")),
    ).toThrow("the server answered: repository disabled");
  });

  it("refuses an answer cut short, or one for another service, or without the service line", () => {
    expect(() =>
      parseAdvertisement(stream("# service=git-upload-pack\n", "0000", `${A} refs/heads/main\0x\n`)),
    ).toThrow(/without a flush-pkt/);
    expect(() => parseAdvertisement(stream("# service=git-receive-pack\n", "0000", "0000"))).toThrow(
      /another service/,
    );
    expect(() => parseAdvertisement(stream(`${A} refs/heads/main\0x\n`, "0000"))).toThrow(/# service=/);
    expect(() => parseAdvertisement(stream("# service=git-upload-pack\n", `${A} HEAD\n`, "0000"))).toThrow(
      /no flush-pkt after/,
    );
    expect(() =>
      parseAdvertisement(stream("# service=git-upload-pack\n", "0000", "not-an-oid HEAD\n", "0000")),
    ).toThrow(/malformed ref line/);
    expect(() => parseAdvertisement(bytes("<html>"))).toThrow(/not a pkt-line stream/);
  });
});

describe("dumb info/refs", () => {
  it("reads obj-id TAB refname lines and peeled tags", () => {
    const ad = parseDumbInfoRefs(
      `${A}\trefs/heads/maint\n${B}\trefs/heads/master\n${C}\trefs/tags/v1.0\n${D}\trefs/tags/v1.0^{}\n`,
    );
    expect(ad).toEqual({
      protocol: "dumb",
      capabilities: [],
      refs: [
        { name: "refs/heads/maint", oid: A },
        { name: "refs/heads/master", oid: B },
        { name: "refs/tags/v1.0", oid: C, peeled: D },
      ],
    });
  });

  it("reads an empty file as no refs, tolerates CRLF, and refuses anything else", () => {
    expect(parseDumbInfoRefs("").refs).toEqual([]);
    expect(parseDumbInfoRefs(`${A}\trefs/heads/main\r\n`).refs).toEqual([
      { name: "refs/heads/main", oid: A },
    ]);
    expect(() => parseDumbInfoRefs("<!doctype html>\n<title>Sign in</title>\n")).toThrow(/line 1/);
    expect(() => parseDumbInfoRefs(`${A}\trefs/tags/x^{}\n`)).toThrow(/follows no ref/);
  });

  it("is chosen by Content-Type: the smart type is pkt-lines, any other type is the dumb file", () => {
    const smart = stream("# service=git-upload-pack\n", "0000", `${A} refs/heads/main\0x\n`, "0000");
    expect(parseInfoRefs(smart, "application/x-git-upload-pack-advertisement; charset=binary").protocol).toBe(
      "v0",
    );
    expect(parseInfoRefs(bytes(`${A}\trefs/heads/main\n`), "text/plain; charset=utf-8").protocol).toBe(
      "dumb",
    );
    expect(parseInfoRefs(bytes(`${A}\trefs/heads/main\n`), null).protocol).toBe("dumb");
    expect(() => parseInfoRefs(smart, "application/x-git-receive-pack-advertisement")).toThrow(
      /Content-Type/,
    );
  });
});

describe("protocol v2 ls-refs", () => {
  it("asks for the branch and the tag, with the object format the server named", () => {
    const body = text(lsRefsRequest("main", ["agent=git/2.39.5", "ls-refs=unborn", "object-format=sha256"]));
    expect(body).toBe(
      "0014command=ls-refs\n" +
        "0017agent=git/labfleet\n" +
        "0019object-format=sha256\n" +
        "0001" +
        "0009peel\n" +
        "001fref-prefix refs/heads/main\n" +
        "001eref-prefix refs/tags/main\n" +
        "0000",
    );
    expect(text(lsRefsRequest("x", ["ls-refs"]))).not.toContain("agent=");
  });

  it("reads refs with their peeled attribute and skips an unborn HEAD", () => {
    const refs = parseLsRefs(
      stream(
        "unborn HEAD symref-target:refs/heads/main\n",
        `${A} refs/heads/main\n`,
        `${C} refs/tags/v1.0 peeled:${D}\n`,
        "0000",
      ),
    );
    expect(refs).toEqual([
      { name: "refs/heads/main", oid: A },
      { name: "refs/tags/v1.0", oid: C, peeled: D },
    ]);
    expect(() => parseLsRefs(stream(`${A} refs/heads/main\n`))).toThrow(/without a flush-pkt/);
    expect(() => parseLsRefs(stream("ERR unknown command\n"))).toThrow(
      "the server answered: unknown command",
    );
  });
});

describe("URLs", () => {
  it("strips credentials from every URL in a text", () => {
    expect(redactUrl("https://user:s3cret@example.com/a.git")).toBe("https://example.com/a.git");
    expect(redactUrl("fatal: 'https://tok@h/x' and ssh://u:p@h2/y")).toBe(
      "fatal: 'https://h/x' and ssh://h2/y",
    );
    expect(redactUrl("git@github.com:o/r.git")).toBe("git@github.com:o/r.git");
  });

  it("turns URL credentials into a Basic header and drops the trailing slash and fragment", () => {
    expect(httpRepo("https://x-access-token:ab%2Fcd@example.com/o/r.git/#frag")).toEqual({
      base: "https://example.com/o/r.git",
      authorization: `Basic ${Buffer.from("x-access-token:ab/cd").toString("base64")}`,
    });
    expect(httpRepo("https://example.com/o/r")).toEqual({ base: "https://example.com/o/r" });
    expect(() => httpRepo("https://user:pw@exa mple.com/")).toThrow(/not a valid URL: https:\/\/exa mple/);
  });

  it("appends info/refs and the one service parameter, after a query with &", () => {
    expect(infoRefsUrl("https://example.com/o/r.git")).toBe(
      "https://example.com/o/r.git/info/refs?service=git-upload-pack",
    );
    expect(infoRefsUrl("http://example.com/daemon.cgi?svc=git&q=")).toBe(
      "http://example.com/daemon.cgi?svc=git&q=/info/refs&service=git-upload-pack",
    );
  });
});

describe("checkRef with a fetch double", () => {
  const advert = stream(
    "# service=git-upload-pack\n",
    "0000",
    `${A} HEAD\0symref=HEAD:refs/heads/main\n`,
    `${A} refs/heads/main\n`,
    `${C} refs/tags/v1.0\n`,
    `${D} refs/tags/v1.0^{}\n`,
    "0000",
  );
  type Call = { url: string; init: RequestInit };
  const fake = (answer: (call: Call) => Response) => {
    const calls: Call[] = [];
    const f = (async (url: string | URL | Request, init?: RequestInit) => {
      const call = { url: String(url), init: init ?? {} };
      calls.push(call);
      return answer(call);
    }) as typeof fetch;
    return { f, calls };
  };
  const smart = () =>
    new Response(advert, { headers: { "Content-Type": "application/x-git-upload-pack-advertisement" } });

  afterEach(() => setLogSink((line) => process.stderr.write(`${line}\n`), "warn"));

  it("finds a branch and a tag, asking for v0 with no Git-Protocol header and no credentials in the URL", async () => {
    const { f, calls } = fake(smart);
    const s = spec("git:https://bot:tok3n@git.example/o/lab.git");
    await checkRef(s, "main", { fetch: f, git: null });
    await checkRef(s, "v1.0", { fetch: f, git: null });
    expect(calls.map((c) => c.url)).toEqual([
      "https://git.example/o/lab.git/info/refs?service=git-upload-pack",
      "https://git.example/o/lab.git/info/refs?service=git-upload-pack",
    ]);
    const headers = calls[0]?.init.headers as Record<string, string>;
    expect(headers.Authorization).toBe(`Basic ${Buffer.from("bot:tok3n").toString("base64")}`);
    expect(Object.keys(headers).map((h) => h.toLowerCase())).not.toContain("git-protocol");
    expect(calls[0]?.init.redirect).toBe("follow");
    expect(calls[0]?.init.signal).toBeInstanceOf(AbortSignal);
  });

  it("refuses a ref that is neither, on the path ref, with the URL shown without credentials", async () => {
    const { f } = fake(smart);
    const err = await rejection(
      checkRef(spec("git:https://bot:tok3n@git.example/o/lab.git"), "nope", { fetch: f, git: null }),
    );
    expect(err.code).toBe("deploy.unknown_ref");
    expect(err.message).toBe("ref nope is neither a branch nor a tag of the lab source");
    expect(err.details).toEqual([
      { path: "ref", message: "expected a branch, tag or commit of https://git.example/o/lab.git" },
    ]);
    expect(JSON.stringify(err)).not.toContain("tok3n");
    // A peeled name and HEAD are not branches or tags.
    expect(
      (await rejection(checkRef(spec("git:https://git.example/o/lab.git"), "HEAD", { fetch: f }))).code,
    ).toBe("deploy.unknown_ref");
  });

  it("explains 401, 403 and 404, with or without credentials, and never shows the token", async () => {
    for (const status of [401, 403, 404]) {
      const { f } = fake(() => new Response("no", { status }));
      const bare = await rejection(checkRef(spec("git:https://git.example/o/lab.git"), "main", { fetch: f }));
      expect(bare.code).toBe("deploy.source_unreachable");
      expect(bare.message).toBe(
        `cannot read the lab's git source to check ref main: https://git.example/o/lab.git answered HTTP ${status}: ` +
          "the repository does not exist, or it is private and the URL has no credentials (give them as USER:TOKEN@HOST in the URL)",
      );
      const withToken = await rejection(
        checkRef(spec("git:https://bot:tok3n@git.example/o/lab.git"), "main", { fetch: f }),
      );
      expect(withToken.message).toContain("the credentials in the URL were refused");
      expect(withToken.message).not.toContain("tok3n");
    }
    const { f } = fake(() => new Response("boom", { status: 502 }));
    expect((await rejection(checkRef(spec("git:https://git.example/r"), "main", { fetch: f }))).message).toBe(
      "cannot read the lab's git source to check ref main: https://git.example/r answered HTTP 502",
    );
  });

  it("asks a server that answers protocol v2 anyway with ls-refs", async () => {
    const { f, calls } = fake((call) =>
      call.init.method === "POST"
        ? new Response(stream(`${A} refs/heads/feature\n`, "0000"), {
            headers: { "Content-Type": "application/x-git-upload-pack-result" },
          })
        : new Response(stream("version 2\n", "agent=git/2.39.5\n", "ls-refs=unborn\n", "0000"), {
            headers: { "Content-Type": "application/x-git-upload-pack-advertisement" },
          }),
    );
    await checkRef(spec("git:https://git.example/lab.git"), "feature", { fetch: f });
    expect(calls[1]?.url).toBe("https://git.example/lab.git/git-upload-pack");
    const headers = calls[1]?.init.headers as Record<string, string>;
    expect(headers["Git-Protocol"]).toBe("version=2");
    expect(headers["Content-Type"]).toBe("application/x-git-upload-pack-request");
    expect(text(calls[1]?.init.body as Uint8Array)).toContain("ref-prefix refs/heads/feature\n");
    expect(
      (await rejection(checkRef(spec("git:https://git.example/lab.git"), "main", { fetch: f }))).code,
    ).toBe("deploy.unknown_ref");
  });

  it("sends ls-refs where info/refs was redirected, without the credentials when that is another origin", async () => {
    // Response cannot be built as redirected: the two properties are set on an ordinary one.
    const moved = (url: string): Response => {
      const r = new Response(stream("version 2\n", "ls-refs\n", "0000"), {
        headers: { "Content-Type": "application/x-git-upload-pack-advertisement" },
      });
      Object.defineProperty(r, "redirected", { value: true });
      Object.defineProperty(r, "url", { value: url });
      return r;
    };
    for (const [target, keepsAuth] of [
      ["https://mirror.example/lab.git", false],
      ["https://git.example/new/lab.git", true],
    ] as const) {
      const { f, calls } = fake((call) =>
        call.init.method === "POST"
          ? new Response(stream(`${A} refs/heads/main\n`, "0000"))
          : moved(`${target}/info/refs?service=git-upload-pack`),
      );
      await checkRef(spec("git:https://bot:tok3n@git.example/lab.git"), "main", { fetch: f });
      expect(calls[1]?.url).toBe(`${target}/git-upload-pack`);
      expect(Object.keys((calls[1]?.init.headers ?? {}) as Record<string, string>)).toContain("User-Agent");
      expect(
        Object.keys((calls[1]?.init.headers ?? {}) as Record<string, string>).includes("Authorization"),
      ).toBe(keepsAuth);
    }
  });

  it("takes a commit id and an impossible ref name without a request", async () => {
    const { f, calls } = fake(smart);
    await checkRef(spec("git:https://git.example/lab.git"), "abc1234", { fetch: f });
    await checkRef(spec("git:https://git.example/lab.git"), "0123456789abcdef0123456789abcdef01234567", {
      fetch: f,
    });
    for (const ref of ["a b", "x..y", "x^{}", "x.lock", "-\n-"]) {
      const err = await rejection(checkRef(spec("git:https://git.example/lab.git"), ref, { fetch: f }));
      expect(err.code).toBe("deploy.unknown_ref");
    }
    expect(calls).toEqual([]);
  });

  it("refuses a ref for a source that is not git:", async () => {
    const err = await rejection(checkRef(spec("/srv/lab"), "main"));
    expect(err.code).toBe("deploy.ref_without_git");
    expect(err.details[0]?.path).toBe("ref");
  });

  it("leaves a non-http source to the hosts when there is no git, with an info line without credentials", async () => {
    const lines: string[] = [];
    setLogSink((line) => lines.push(line), "debug");
    const { f, calls } = fake(smart);
    for (const source of [
      "git:ssh://deploy:pw@git.example/lab.git",
      "git:git@git.example:o/lab.git",
      "git:file:///srv/lab",
    ]) {
      await checkRef(spec(source), "main", { fetch: f, git: null });
    }
    expect(calls).toEqual([]);
    const logged = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(logged.map((l) => [l.level, l.ref, l.source])).toEqual([
      ["info", "main", "ssh://git.example/lab.git"],
      ["info", "main", "git@git.example:o/lab.git"],
      ["info", "main", "file:///srv/lab"],
    ]);
    expect(lines.join("\n")).not.toContain("pw@");
  });
});

// Builds the Lambda bundles as `sst deploy` builds them (`tsx scripts/build-lambdas.ts [outDir]`, default
// .build/lambdas), for the AWS double (tests/harness/aws/lambda.ts) to run. Prints each bundle's size.

import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { builtinModules, createRequire } from "node:module";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type BuildOptions, build, type Message, type Metafile } from "esbuild";
import { FUNCTIONS, type FunctionName, installOf } from "../infra/permissions.ts";

/**
 * What SST's Node runtime does for each function (sst/sst `pkg/runtime/node/build.go`), for a deploy:
 * - esbuild bundles the handler's file to `<out>/<folder>/<name>.mjs`: ESM, platform node, keepNames,
 *   mainFields module,main, a banner that defines `require`, `__filename` and `__dirname`, externals `sharp`,
 *   `pg-native` and the function's `nodejs.install` list; minified (`nodejs.minify` defaults to true), no
 *   source map (`nodejs.sourcemap` defaults to false), no splitting. SST's own default target is esnext; here
 *   the target is the deployed runtime's (nodejs22.x), so the bundle holds no syntax newer than Node 22.
 * - It writes `<out>/package.json` with those packages (at the project's version) and runs `npm install` there.
 *   Here the packages and their production dependencies are copied from the project's node_modules instead
 *   (no network), keeping their layout.
 * SST builds once per function; functions sharing a handler file share one bundle here (the same bytes). SST's
 * check that the `sst` package matches its CLI's version is not done.
 */

export const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** SST always leaves these out of a bundle (`forceExternal`). */
const FORCE_EXTERNAL = ["sharp", "pg-native"];
/** The nodejs22.x runtime. */
export const DEFAULT_TARGET = "node22";
/** SST tries these extensions, in order, for a handler's file. */
const NODE_EXTENSIONS = [".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs"];
/** AGPL-3.0 (the IAM simulator of the tests): never in a deployed bundle. */
const FORBIDDEN_INPUT = /(^|[/\\])node_modules[/\\]@cloud-copilot[/\\]/;

const BANNER = [
  `import { createRequire as topLevelCreateRequire } from 'module';`,
  `const require = topLevelCreateRequire(import.meta.url);`,
  `import { fileURLToPath as topLevelFileUrlToPath, URL as topLevelURL } from "url"`,
  `const __filename = topLevelFileUrlToPath(import.meta.url)`,
  `const __dirname = topLevelFileUrlToPath(new topLevelURL(".", import.meta.url))`,
  // `nodejs.banner` (none here) is joined last.
  "",
].join("\n");

export interface LambdaBundle {
  /** The handler file it is built from, relative to the project (`functions/lambda.ts`). */
  source: string;
  /** The bundle directory: what SST zips (LAMBDA_TASK_ROOT). */
  dir: string;
  /** The bundle, relative to `dir` (`functions/lambda.mjs`). */
  file: string;
  bytes: number;
  /** Bytes of the packages installed beside it (`dir/node_modules`). */
  installedBytes: number;
  /** The installed packages, `name@version`. */
  installed: string[];
  /** Every input esbuild read, relative to the project (the metafile's inputs). */
  inputs: string[];
  metafile: Metafile;
}

export interface LambdaHandler {
  /** The bundle directory (LAMBDA_TASK_ROOT). */
  dir: string;
  /** The bundle file, relative to `dir`. */
  file: string;
  exportName: string;
  /** Lambda's handler setting: `functions/lambda.BeginUp`. */
  handler: string;
}

export interface LambdaBuild {
  outDir: string;
  target: string;
  bundles: LambdaBundle[];
  functions: Record<FunctionName, LambdaHandler>;
}

export interface BundleInput {
  /** The handler file, absolute or relative to the project. */
  entry: string;
  /** The bundle directory to create (emptied first). */
  dir: string;
  target?: string;
  /** Packages installed beside the bundle instead of bundled (`nodejs.install`). */
  install?: string[];
  minify?: boolean;
}

/** The esbuild options SST uses for a deploy, for one handler file. */
export function sstBuildOptions(input: BundleInput): BuildOptions & { outfile: string } {
  const entry = resolve(PROJECT_ROOT, input.entry);
  const rel = relative(PROJECT_ROOT, entry);
  const ext = NODE_EXTENSIONS.find((e) => rel.endsWith(e)) ?? "";
  // Lambda's handler allows one dot, between the file's name and the export: SST turns others into dashes.
  const base = rel.slice(0, rel.length - ext.length);
  const name = base.split(sep).pop()?.replaceAll(".", "-") ?? base;
  const folder = dirname(base);
  const outfile = join(input.dir, folder === "." ? "" : folder, `${name}.mjs`);
  const minify = input.minify ?? true;
  return {
    entryPoints: [entry],
    absWorkingDir: PROJECT_ROOT,
    platform: "node",
    external: [...FORCE_EXTERNAL, ...(input.install ?? [])],
    keepNames: true,
    bundle: true,
    splitting: false,
    metafile: true,
    outfile,
    sourcemap: false,
    write: true,
    format: "esm",
    target: input.target ?? DEFAULT_TARGET,
    mainFields: ["module", "main"],
    banner: { js: BANNER },
    minifyWhitespace: minify,
    minifySyntax: minify,
    minifyIdentifiers: minify,
    logLevel: "silent",
  };
}

/**
 * Warnings that change what runs: an import that finds no export, a `require` esbuild cannot follow, a
 * `require.resolve` of a bundled path, `eval`. Others (a duplicate object key, a comparison with NaN) do not.
 */
const FATAL_WARNINGS = new Set([
  "import-is-undefined",
  "unsupported-require-call",
  "unsupported-dynamic-import",
  "require-resolve-not-external",
  "direct-eval",
  "commonjs-variable-in-esm",
  "empty-import-meta",
  "package.json",
]);

function describe(messages: Message[]): string {
  return messages
    .map((m) => {
      const at = m.location ? ` ${m.location.file}:${m.location.line}:${m.location.column}` : "";
      return `  [${m.id || "error"}] ${m.text}${at}`;
    })
    .join("\n");
}

interface Installed {
  name: string;
  version: string;
  /** Where it lives in the project. */
  from: string;
}

/** The package directory `name` resolves to from `fromDir`, as Node looks it up (every node_modules upward). */
function packageDir(name: string, fromDir: string): string | undefined {
  const paths = createRequire(join(fromDir, "package.json")).resolve.paths(name) ?? [];
  for (const p of paths) {
    const dir = join(p, name);
    if (existsSync(join(dir, "package.json"))) return dir;
  }
  return undefined;
}

/** A package and its production dependencies (optional ones when installed), as npm installs them. */
function dependencyClosure(roots: string[]): Installed[] {
  const seen = new Map<string, Installed>();
  const visit = (name: string, fromDir: string, optional: boolean) => {
    const dir = packageDir(name, fromDir);
    if (!dir) {
      if (optional) return;
      throw new Error(`build-lambdas: ${name} (needed beside the bundle) is not installed under ${fromDir}`);
    }
    if (seen.has(dir)) return;
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as {
      version: string;
      dependencies?: Record<string, string>;
      optionalDependencies?: Record<string, string>;
    };
    seen.set(dir, { name, version: pkg.version, from: dir });
    for (const dep of Object.keys(pkg.dependencies ?? {})) visit(dep, dir, false);
    for (const dep of Object.keys(pkg.optionalDependencies ?? {})) visit(dep, dir, true);
  };
  for (const root of roots) visit(root, PROJECT_ROOT, false);
  return [...seen.values()];
}

function sizeOf(path: string): number {
  const st = statSync(path);
  if (!st.isDirectory()) return st.size;
  return readdirSync(path).reduce((n, entry) => n + sizeOf(join(path, entry)), 0);
}

/**
 * Installs `packages` beside a bundle as SST does (a package.json naming them at the project's versions, then
 * their files under `dir/node_modules`), copying them from the project's node_modules with their layout.
 */
function installBeside(dir: string, packages: string[]): Installed[] {
  if (packages.length === 0) return [];
  const root = JSON.parse(readFileSync(join(PROJECT_ROOT, "package.json"), "utf8")) as {
    dependencies?: Record<string, string>;
  };
  const dependencies = Object.fromEntries(packages.map((p) => [p, root.dependencies?.[p] ?? "*"]));
  writeFileSync(join(dir, "package.json"), `${JSON.stringify({ dependencies })}\n`);
  const closure = dependencyClosure(packages);
  for (const pkg of closure) {
    const rel = relative(PROJECT_ROOT, pkg.from);
    if (rel.startsWith("..") || !rel.startsWith(`node_modules${sep}`)) {
      throw new Error(`build-lambdas: ${pkg.name} resolves outside the project's node_modules (${pkg.from})`);
    }
    // A package's own nested node_modules are copied as packages of the closure, where they are needed.
    const nested = join(pkg.from, "node_modules");
    cpSync(pkg.from, join(dir, rel), {
      recursive: true,
      dereference: true,
      filter: (src) => src !== nested,
    });
  }
  return closure;
}

/**
 * Bundles one handler file into `input.dir` with SST's options and installs the `install` packages beside it.
 * Fails on esbuild errors, on warnings that change behaviour, on an external import nothing provides at run
 * time, and on any @cloud-copilot input.
 */
export async function buildBundle(input: BundleInput): Promise<LambdaBundle> {
  rmSync(input.dir, { recursive: true, force: true });
  mkdirSync(input.dir, { recursive: true });
  try {
    return await bundleInto(input);
  } catch (e) {
    // Nothing half-built (or holding what must not ship) is left behind.
    rmSync(input.dir, { recursive: true, force: true });
    throw e;
  }
}

async function bundleInto(input: BundleInput): Promise<LambdaBundle> {
  const options = sstBuildOptions(input);
  const install = input.install ?? [];
  let result: Awaited<ReturnType<typeof build>>;
  try {
    result = await build(options);
  } catch (e) {
    const errors = (e as { errors?: Message[] }).errors;
    if (errors) throw new Error(`build-lambdas: esbuild failed for ${input.entry}:\n${describe(errors)}`);
    throw e;
  }
  const fatal = result.warnings.filter((w) => FATAL_WARNINGS.has(w.id));
  if (fatal.length > 0) {
    throw new Error(`build-lambdas: esbuild warnings for ${input.entry}:\n${describe(fatal)}`);
  }
  for (const w of result.warnings.filter((w) => !FATAL_WARNINGS.has(w.id))) {
    console.warn(`build-lambdas: esbuild warning for ${input.entry}:\n${describe([w])}`);
  }
  const metafile = result.metafile as Metafile;
  const inputs = Object.keys(metafile.inputs);
  const forbidden = inputs.filter((i) => FORBIDDEN_INPUT.test(i));
  if (forbidden.length > 0) {
    throw new Error(
      `build-lambdas: ${input.entry} bundles AGPL @cloud-copilot code (tests only):\n  ${forbidden.join("\n  ")}`,
    );
  }
  // Whatever esbuild left external must be provided at run time: Node's own modules or an installed package.
  const builtins = new Set(builtinModules);
  const provided = new Set([...FORCE_EXTERNAL, ...install]);
  for (const output of Object.values(metafile.outputs)) {
    for (const imp of output.imports) {
      if (!imp.external) continue;
      const bare = imp.path.replace(/^node:/, "");
      const pkg = imp.path.startsWith("@")
        ? imp.path.split("/").slice(0, 2).join("/")
        : imp.path.split("/")[0];
      if (imp.path.startsWith("node:") || builtins.has(bare) || builtins.has(bare.split("/")[0] ?? ""))
        continue;
      if (pkg && provided.has(pkg)) continue;
      throw new Error(
        `build-lambdas: ${input.entry} imports ${imp.path} at run time, which nothing provides`,
      );
    }
  }
  // SST also installs a force-external package the code imports.
  const imported = FORCE_EXTERNAL.filter((p) =>
    Object.values(metafile.inputs).some((i) => i.imports.some((imp) => imp.external && imp.path === p)),
  );
  const installed = installBeside(input.dir, [...install, ...imported.filter((p) => !install.includes(p))]);
  const file = relative(input.dir, options.outfile);
  const nodeModules = join(input.dir, "node_modules");
  return {
    source: relative(PROJECT_ROOT, resolve(PROJECT_ROOT, input.entry)),
    dir: input.dir,
    file,
    bytes: statSync(options.outfile).size,
    installedBytes: existsSync(nodeModules) ? sizeOf(nodeModules) : 0,
    installed: installed.map((p) => `${p.name}@${p.version}`),
    inputs,
    metafile,
  };
}

/** The handler file (relative to the project) and export of a `file.export` handler, as SST finds them. */
export function handlerFile(handler: string): { source: string; exportName: string } {
  const dot = handler.lastIndexOf(".");
  const base = handler.slice(0, dot);
  const exportName = handler.slice(dot + 1);
  const ext = NODE_EXTENSIONS.find((e) => existsSync(join(PROJECT_ROOT, base + e)));
  if (!ext || dot < 0) throw new Error(`build-lambdas: handler not found: ${handler}`);
  return { source: base + ext, exportName };
}

/** One bundle per distinct handler file of infra/permissions.ts FUNCTIONS, each in `<outDir>/<file-slug>/`. */
export async function buildLambdas(opts: { outDir: string; target?: string }): Promise<LambdaBuild> {
  const outDir = resolve(opts.outDir);
  const target = opts.target ?? DEFAULT_TARGET;
  const names = Object.keys(FUNCTIONS) as FunctionName[];
  const sources = new Map<string, FunctionName[]>();
  for (const name of names) {
    const { source } = handlerFile(FUNCTIONS[name].handler);
    sources.set(source, [...(sources.get(source) ?? []), name]);
  }
  const bundles = await Promise.all(
    [...sources.keys()].map((source) =>
      buildBundle({
        entry: source,
        dir: join(outDir, source.replace(/\.[^.]+$/, "").replaceAll(/[/\\.]/g, "-")),
        target,
        install: installOf((sources.get(source) as FunctionName[])[0] as FunctionName),
      }),
    ),
  );
  const functions = {} as Record<FunctionName, LambdaHandler>;
  for (const name of names) {
    const { source, exportName } = handlerFile(FUNCTIONS[name].handler);
    const bundle = bundles.find((b) => b.source === source) as LambdaBundle;
    const handlerBase = bundle.file
      .replace(/\.mjs$/, "")
      .split(sep)
      .join("/");
    functions[name] = {
      dir: bundle.dir,
      file: bundle.file,
      exportName,
      handler: `${handlerBase}.${exportName}`,
    };
  }
  return { outDir, target, bundles, functions };
}

const mb = (n: number) => `${(n / 1024 / 1024).toFixed(2)} MB`;

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const outDir = process.argv[2] ?? join(PROJECT_ROOT, ".build", "lambdas");
  const result = await buildLambdas({ outDir });
  for (const b of result.bundles) {
    const users = Object.entries(result.functions)
      .filter(([, f]) => f.dir === b.dir)
      .map(([name]) => name);
    console.log(
      `${relative(process.cwd(), join(b.dir, b.file))}  ${mb(b.bytes)}  (${b.inputs.length} inputs; ` +
        `node_modules ${mb(b.installedBytes)}: ${b.installed.join(", ")})  for ${users.join(", ")}`,
    );
  }
}

// Writes web/time-format-js.ts (`npm run time-script`): shared/runtime/time-format.ts compiled for the browser,
// so the console's and the portal's scripts show times with the very code the CLI uses. A test fails when the
// compiled copy no longer matches its source.
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { build } from "esbuild";

const source = new URL("../shared/runtime/time-format.ts", import.meta.url).pathname;
const out = new URL("../web/time-format-js.ts", import.meta.url).pathname;

const result = await build({
  entryPoints: [source],
  bundle: true,
  format: "iife",
  globalName: "labfleetTime",
  platform: "browser",
  target: "es2020",
  legalComments: "none",
  write: false,
});
const js = result.outputFiles[0]?.text ?? "";
// As a template literal, readable in the file: backslashes, backticks and placeholders escaped.
const literal = js.replace(/\\/g, "\\\\").replace(/`/g, "\\`").replace(/\$\{/g, "\\${");
const sha = createHash("sha256").update(readFileSync(source)).digest("hex");
writeFileSync(
  out,
  `// Generated from shared/runtime/time-format.ts by \`npm run time-script\`: do not edit.
/** The sha256 of the time-format.ts this was compiled from. */
export const TIME_FORMAT_SOURCE_SHA256 = "${sha}";

/** time-format.ts as a browser script: it defines \`labfleetTime\` (formatClock, formatRelative, ...). */
export const timeFormatJs = \`${literal}\`;
`,
);
console.log(`wrote ${out}`);

// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { TokenInfo } from "../../../shared/auth/tokens.ts";
import { Time } from "../../time.tsx";
import { Csrf, DataTable, Layout, Notice, type Viewer } from "./layout.tsx";

// ------------------------------------------------------------------------------------------- API tokens

export type TokenRow = TokenInfo & { mine: boolean };

export function TokenRows(props: { tokens: TokenRow[]; csrf: string }) {
  if (props.tokens.length === 0)
    return (
      <tr>
        <td colspan={6}>No API tokens yet. Create one below, or run labfleet login.</td>
      </tr>
    );
  return (
    <>
      {props.tokens.map((t) => (
        <tr id={`tok-${t.id}`}>
          <th scope="row">{t.name}</th>
          <td>
            {t.owner}
            {t.mine ? " (you)" : ""}
          </td>
          <td class="num">
            <Time at={t.createdAt} />
          </td>
          <td class="num">{t.lastUsedAt ? <Time at={t.lastUsedAt} /> : "never"}</td>
          <td class="num">{t.expiresAt ? <Time at={t.expiresAt} show="when" /> : "never"}</td>
          <td>
            <form method="post" action="/console/tokens/revoke">
              <Csrf token={props.csrf} />
              <input type="hidden" name="id" value={t.id} />
              <button type="submit" class="danger secondary" aria-label={`Revoke the token ${t.name}`}>
                Revoke…
              </button>
            </form>
          </td>
        </tr>
      ))}
    </>
  );
}

export function TokensPage(props: {
  viewer: Viewer;
  tokens: TokenRow[];
  notice?: string | undefined;
  /** The create form sent back: what was typed, and its errors by field (name, days). */
  form?: { name: string; days: string };
  errors?: { name?: string | undefined; days?: string | undefined };
}) {
  const errors = props.errors ?? {};
  const failed = Boolean(errors.name || errors.days);
  return (
    <Layout title="API tokens" viewer={props.viewer} section="tokens">
      <h1>API tokens</h1>
      <Notice text={props.notice} />
      <p>
        The CLI and scripts send an API token to the instructor API. labfleet keeps only a hash of each token:
        a token is shown once, when it is created. Every instructor's tokens are listed, and any instructor
        may revoke one (a lost laptop's, say).
      </p>
      <DataTable
        caption="Tokens that work now (expired ones are left out)"
        columns={["Name", "Owner", "Created", "Last used", "Expires", "Actions"]}
      >
        <TokenRows tokens={props.tokens} csrf={props.viewer.csrf} />
      </DataTable>
      <h2 id="create-h">Create a token</h2>
      {failed ? (
        <div class="alert" role="alert" id="token-errors">
          <h3>The token was not created</h3>
          <ul>
            {errors.name ? <li>Name: {errors.name}</li> : null}
            {errors.days ? <li>Expires after: {errors.days}</li> : null}
          </ul>
        </div>
      ) : null}
      <form method="post" action="/console/tokens" class="panel" aria-labelledby="create-h">
        <Csrf token={props.viewer.csrf} />
        <label for="token-name">Name</label>
        <input
          id="token-name"
          name="name"
          type="text"
          required
          maxlength={80}
          autocomplete="off"
          value={props.form?.name ?? ""}
          aria-describedby="token-name-hint"
          aria-invalid={errors.name ? "true" : undefined}
        />
        <p class="hint" id="token-name-hint">
          Where it will be used, such as "laptop CLI" or "CI deploy job".
        </p>
        <label for="token-days">Expires after (days)</label>
        <input
          id="token-days"
          name="days"
          type="number"
          min="1"
          max="3650"
          step="1"
          value={props.form?.days ?? "90"}
          aria-describedby="token-days-hint"
          aria-invalid={errors.days ? "true" : undefined}
        />
        <p class="hint" id="token-days-hint">
          From 1 to 3650. Leave it empty for a token that works until it is revoked.
        </p>
        <p>
          <button type="submit">Create token</button>
        </p>
      </form>
    </Layout>
  );
}

export function TokenCreatedPage(props: { viewer: Viewer; token: string; info: TokenInfo; url: string }) {
  return (
    <Layout title="Token created" viewer={props.viewer} section="tokens">
      <h1>Token created: {props.info.name}</h1>
      <p class="notice" role="status">
        Copy the token now. It is shown only on this page, once: labfleet keeps only its hash.
      </p>
      <label for="new-token">The new API token</label>
      <input
        id="new-token"
        class="secret"
        type="text"
        readonly
        value={props.token}
        spellcheck={false}
        autocomplete="off"
        aria-describedby="new-token-hint"
      />
      <p class="hint" id="new-token-hint">
        {props.info.expiresAt ? (
          <>
            It works until <Time at={props.info.expiresAt} show="when" />
          </>
        ) : (
          "It works until it is revoked"
        )}
        , for the instructor API at this address.
      </p>
      <h2>Use it with the CLI</h2>
      <p>Run this, then paste the token when asked (or pipe it in):</p>
      <pre class="command">
        <code id="login-hint">labfleet login --url {props.url} --token</code>
      </pre>
      <p class="hint">
        The CLI stores it in <code>~/.labfleet/credentials</code> (mode 0600). Scripts send it as{" "}
        <code>Authorization: Bearer ...</code>.
      </p>
      <p>
        <a href="/console/tokens">Back to API tokens</a>
      </p>
    </Layout>
  );
}

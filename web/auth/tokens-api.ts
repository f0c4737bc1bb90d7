import { Hono } from "hono";
import { z } from "zod";
import {
  assertInstructor,
  CreateTokenInput,
  createToken,
  listTokens,
  presentedTokenInfo,
  revokePresentedToken,
  revokeToken,
  TokenId,
} from "../../shared/auth/tokens.ts";

/**
 * Instructor API tokens, mounted at /api/tokens behind the instructor API's bearer check:
 *   GET    /api/tokens            every live token (never a token or its hash)
 *   POST   /api/tokens            {name, expiresInDays?} -> 201 {token, info}: the only time the token is shown
 *   GET    /api/tokens/current    who the bearer is, and the token's info when it is an API token
 *   DELETE /api/tokens/current    revokes the bearer's own token (`labfleet logout`)
 *   DELETE /api/tokens/:id        revokes a token by id
 */

async function jsonBody(req: Request): Promise<unknown> {
  const text = await req.text();
  return text === "" ? {} : JSON.parse(text);
}

const bearer = (header: string | undefined) => /^Bearer\s+(\S+)$/i.exec(header ?? "")?.[1] ?? "";

export const tokensApi = new Hono()
  .get("/", async (c) => c.json({ tokens: await listTokens() }))
  .post("/", async (c) => {
    const input = CreateTokenInput.parse(await jsonBody(c.req.raw));
    return c.json(await createToken(input), 201);
  })
  .get("/current", async (c) => {
    const info = await presentedTokenInfo(bearer(c.req.header("authorization")));
    return c.json({ owner: assertInstructor().id, token: info ?? null });
  })
  .delete("/current", async (c) =>
    c.json({ revoked: await revokePresentedToken(bearer(c.req.header("authorization"))) }),
  )
  .delete("/:id", async (c) => {
    // Checked as a parameter, so a malformed id is a 400 naming `id`, as other path parameters are.
    const { id } = z.object({ id: TokenId }).parse({ id: c.req.param("id") });
    return c.json({ revoked: await revokeToken(id) });
  });

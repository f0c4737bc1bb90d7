import { AsyncLocalStorage } from "node:async_hooks";
import { VisibleError } from "./errors.ts";

/**
 * Who is acting: set by each entry point (HTTP middleware, workflow handler, scheduler), read by domain code.
 * An instructor's `name` is what activity shows as who did it: the API token's name or the sign-in identity's
 * display name, never an email or a token.
 */
export type Actor =
  | { type: "instructor"; id: string; name?: string }
  | { type: "system"; id: string }
  /** A host's own signed call (shared/agent/): an enrolled host's agent, or a host pushing its lab's progress. */
  | { type: "host"; workshop: string; hostId: string }
  | { type: "public" };

const storage = new AsyncLocalStorage<Actor>();

export function withActor<T>(actor: Actor, fn: () => T): T {
  return storage.run(actor, fn);
}

export function useActor(): Actor {
  return storage.getStore() ?? { type: "public" };
}

/** Instructor actions may also be taken by the system (workflows, schedules) acting for them. */
export function assertActor(...types: Actor["type"][]): Actor {
  const actor = useActor();
  if (!types.includes(actor.type)) {
    throw new VisibleError("forbidden", "actor.forbidden", `this action needs a ${types.join(" or ")} actor`);
  }
  return actor;
}

/**
 * Who did it, in words for an activity list: the instructor's name ("instructor" without one), "labfleet" for
 * what labfleet did by itself (workflows, schedules, health passes), "host ID" for a host's own call, "student" for
 * the portal's visitors.
 */
export function actorName(actor: Actor = useActor()): string {
  if (actor.type === "instructor") return actor.name?.trim() || "instructor";
  if (actor.type === "host") return `host ${actor.hostId}`;
  return actor.type === "system" ? "labfleet" : "student";
}

/**
 * The console's pages, one file per part of the console under views/: the layout and the pieces every page
 * uses, sign-in and the workshops list, one workshop, its portal and the slide for the room, its runs, API tokens.
 */
export * from "./views/enroll.tsx";
export * from "./views/fleet.tsx";
export * from "./views/layout.tsx";
export * from "./views/portal.tsx";
export * from "./views/rebuild.tsx";
export * from "./views/rollout.tsx";
export * from "./views/runs.tsx";
export * from "./views/slide.tsx";
export * from "./views/tokens.tsx";
export * from "./views/workshop.tsx";
export * from "./views/workshops.tsx";

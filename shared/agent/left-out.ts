/**
 * Which enrolled hosts runs leave out (`up`, `deploy`, `retry`, and the workshop's readiness): a host waiting for
 * approval, drained or disabled gets no new work, so no run deploys it, waits for it or counts it among the
 * workshop's labs; the portal's open_at_percent and "every lab ready" are judged over the others. A host that is
 * building a lab when it is drained or disabled is still followed by the run's polls (what runs on it stays), and
 * once enabled or approved a host that was left out is deployed by the scheduler's next pass
 * (shared/agent/lifecycle.ts deployWaitingHosts). Pure: no store, no clock.
 */
export function leftOutOfRuns(h: {
  provider: string;
  state: string;
  enrollment?: "pending" | "approved" | undefined;
  drained?: boolean | undefined;
  disabled?: boolean | undefined;
}): boolean {
  if (h.provider !== "enrolled" || h.state === "deploying") return false;
  return h.enrollment !== "approved" || !!h.drained || !!h.disabled;
}

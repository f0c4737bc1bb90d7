/**
 * A small built-in table of On-Demand list prices (USD per hour, Linux, shared tenancy) for the default
 * instance tiers, so `plan` can say what a fleet costs without the Pricing API (which needs its own
 * permission and answers only from us-east-1 and a few other regions). Anything not in the table is
 * "cost unknown": labfleet never guesses a price.
 *
 * m7i (the default tiers) costs the same in us-east-1, us-east-2 and us-west-2, $0.1008/h per 2 vCPUs.
 * Prices change: check https://aws.amazon.com/ec2/pricing/on-demand/ before relying on them. Other regions,
 * the nested-virtualization tiers (m8i) and other types are left out rather than approximated.
 */

const M7I = {
  "m7i.large": 0.1008,
  "m7i.xlarge": 0.2016,
  "m7i.2xlarge": 0.4032,
  "m7i.4xlarge": 0.8064,
} as const;

export const ON_DEMAND_PRICES: Readonly<Record<string, Readonly<Record<string, number>>>> = {
  "us-east-1": M7I,
  "us-east-2": M7I,
  "us-west-2": M7I,
};

/** USD per hour of one On-Demand Linux instance, or undefined when labfleet does not know it. */
export function onDemandPricePerHour(region: string | undefined, instanceType: string): number | undefined {
  if (region === undefined) return undefined;
  return ON_DEMAND_PRICES[region]?.[instanceType];
}

/** `$0.1008/h on demand` or `cost unknown`, for a plan line. */
export function costText(region: string | undefined, instanceType: string | undefined): string {
  const price = instanceType === undefined ? undefined : onDemandPricePerHour(region, instanceType);
  return price === undefined ? "cost unknown" : `$${price.toFixed(4)}/h on demand`;
}

import { describe, expect, it } from "vitest";
import { studentSsh } from "../../shared/portal/claims.ts";
import { codeHash, generateCode, normalizeCode } from "../../shared/portal/codes.ts";
import { hashPin, pinProblem, verifyPin } from "../../shared/portal/pins.ts";

describe("workshop codes", () => {
  it("look like LAB-XVFDQK-20261130, with the letters asked for", () => {
    const code = generateCode(6, new Date("2026-11-30T10:00:00Z"));
    expect(code).toMatch(/^LAB-[A-HJ-NP-Z]{6}-20261130$/);
    expect(generateCode(4, new Date("2026-01-02T00:00:00Z"))).toMatch(/^LAB-[A-Z]{4}-20260102$/);
    expect(new Set(Array.from({ length: 50 }, () => generateCode(8, new Date()))).size).toBe(50);
  });
  it("ignore case, spaces and dashes", () => {
    expect(normalizeCode(" lab-xvf dqk-2026 1130 ")).toBe("LABXVFDQK20261130");
    expect(codeHash("lab xvfdqk 20261130")).toBe(codeHash("LAB-XVFDQK-20261130"));
    expect(codeHash("LAB-XVFDQK-20261131")).not.toBe(codeHash("LAB-XVFDQK-20261130"));
  });
});

describe("PINs", () => {
  it.each([
    ["12345", "exactly 6 digits"],
    ["12a456", "exactly 6 digits"],
    ["111111", "repeated digit"],
    ["123456", "consecutive"],
    ["654321", "consecutive"],
    ["890123", "consecutive"],
    ["121212", "repeats a pattern"],
    ["123123", "repeats a pattern"],
    ["159753", "most common"],
  ])("refuses %s (%s)", (pin, why) => {
    expect(pinProblem(pin)).toContain(why);
  });
  it("accepts an ordinary PIN", () => {
    expect(pinProblem("503917")).toBeUndefined();
    expect(pinProblem("240681")).toBeUndefined();
  });
  it("are stored with scrypt N=2^14, r=8, p=1 and verified in constant time", async () => {
    const stored = await hashPin("503917");
    expect(stored).toMatch(/^scrypt\$16384\$8\$1\$[\w-]{22}\$[\w-]{43}$/);
    expect(stored).not.toContain("503917");
    expect(await verifyPin("503917", stored)).toBe(true);
    expect(await verifyPin("503918", stored)).toBe(false);
    expect(await hashPin("503917")).not.toBe(stored); // salted
  });
});

describe("the student's SSH command", () => {
  it("uses the login user, the port when it is not 22, and the public IP when there is one", () => {
    expect(studentSsh("lab@127.10.0.5:2222", undefined, undefined)).toBe("ssh -p 2222 lab@127.10.0.5");
    expect(studentSsh("lab@host.example.test", "203.0.113.7", undefined)).toBe("ssh lab@203.0.113.7");
    expect(studentSsh("host.example.test:22", undefined, "ubuntu")).toBe("ssh ubuntu@host.example.test");
    expect(studentSsh("[2001:db8::1]:2200", undefined, "lab")).toBe("ssh -p 2200 lab@2001:db8::1");
  });
});

declare module "asl-validator" {
  interface Result {
    isValid: boolean;
    errors: { path?: string; message: string }[];
    errorsText(separator?: string): string;
  }
  export default function aslValidator(
    definition: unknown,
    opts?: { checkPaths?: boolean; checkArn?: boolean },
  ): Result;
}

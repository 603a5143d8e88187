// agentd's own companion to the suite's tool-calling template, which the
// built-in fake model cannot pass: the fake calls a tool only when the last
// user message says so with a directive line (docs/fake-model.md). This
// runs that template through the suite's runner, its request unchanged but
// for one line added to its user message, the directive to call its tool,
// and judges agentd's answer with the suite's own schema and validators:
// once as JSON and once streamed, where each event must pass the suite's
// event schemas too.
//
// Usage: node --import tsx tool-calling.ts BASE_URL
// It prints the two results, as compliance-test.ts --json prints results.
import {
  runAllTests,
  testTemplates,
  type TestConfig,
  type TestTemplate,
} from "./src/lib/compliance-tests";

const directive = '/call get_weather {"location":"San Francisco, CA"}';

const template = testTemplates.find((t) => t.id === "tool-calling");
if (!template) throw new Error("the suite has no tool-calling template");

const getRequest = (config: TestConfig) => {
  const body = template.getRequest(config);
  const first = (body.input as { content: string }[])[0];
  first.content += "\n" + directive;
  return body;
};

const withDirective: TestTemplate[] = [
  { ...template, getRequest },
  {
    ...template,
    id: "tool-calling-streamed",
    streaming: true,
    getRequest,
    validators: [
      ...template.validators,
      (_, context) =>
        context.sseResult && context.sseResult.events.length > 0
          ? context.sseResult.errors
          : ["No streaming events received"],
    ],
  },
];

const config: TestConfig = {
  baseUrl: process.argv[2],
  apiKey: "local",
  authHeaderName: "Authorization",
  useBearerPrefix: true,
  model: "fake",
  runtime: "server",
};

const results = await runAllTests(config, () => {}, withDirective);
console.log(JSON.stringify(results));

package claude

import (
	"slices"
	"strings"

	"github.com/warren-mesh/warren/internal/wire"
)

// builtinTools are the names of the CLI's own tools: what the pinned CLI lists in its system/init event
// (TestBuiltinToolsCoverTheCLI keeps this list a superset of it), and the names of tools earlier releases
// had or that it lists only in some modes, which its permission rules still accept.
var builtinTools = []string{
	// Listed by the pinned CLI with the default tool set.
	"Task", "Bash", "CronCreate", "CronDelete", "CronList", "Edit", "EnterWorktree", "ExitWorktree", "ListAgents",
	"Monitor", "NotebookEdit", "Read", "ReportFindings", "ScheduleWakeup", "SendMessage", "Skill", "TaskCreate",
	"TaskGet", "TaskList", "TaskStop", "TaskUpdate", "ToolSearch", "WebFetch", "WebSearch", "Workflow", "Write",
	// Other names of the CLI's tools.
	"Agent", "AskUserQuestion", "BashOutput", "EnterPlanMode", "ExitPlanMode", "Glob", "Grep", "KillBash", "KillShell",
	"LS", "LSP", "ListMcpResourcesTool", "MultiEdit", "NotebookRead", "ReadMcpResourceTool", "SlashCommand",
	"TaskOutput", "TodoRead", "TodoWrite",
}

// resolveToolRules maps the tool names of a permission list (allowedTools, disallowedTools,
// permissions.tools, permissions.blockedTools; field names it in errors) to the names the CLI reads, as
// users write them (docs/PROTOCOL.md#tool-names):
//   - a built-in tool, with or without a rule ("Bash", "Bash(git:*)"), and any mcp__<server>,
//     mcp__<server>__* or mcp__<server>__<tool> stay as they are;
//   - a client tool's name as declared in servers means that tool, mcp__<server>__<tool> (each server's that
//     declares it; a built-in of the same name stays named too);
//   - anything else names no tool the session can have and is invalid_argument naming it: a rule the CLI
//     would ignore, so a block that blocks nothing, is never accepted. The tools of stdio, http and sse
//     servers are known only once they run: they are named mcp__<server>__<tool>.
func resolveToolRules(field string, rules []string, servers []wire.MCPServer) ([]string, error) {
	if rules == nil {
		return nil, nil
	}
	out := make([]string, 0, len(rules))
	add := func(r string) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for _, rule := range rules {
		name := toolName(rule)
		if isMCPName(name) || slices.Contains(builtinTools, name) {
			add(rule)
		}
		if isMCPName(name) {
			continue
		}
		found := slices.Contains(builtinTools, name)
		for _, s := range servers {
			if s.Kind() != wire.MCPClient || !slices.ContainsFunc(s.Tools, func(t wire.MCPTool) bool { return t.Name == name }) {
				continue
			}
			if strings.ContainsRune(rule, '(') {
				return nil, wire.Errorf(wire.InvalidArgument, "%s: %q: a client tool takes no rule in parentheses", field, truncate(rule, 64))
			}
			add(s.ToolName(name))
			found = true
		}
		if !found {
			return nil, wire.Errorf(wire.InvalidArgument, "%s: %q names no tool this session can have: a built-in tool, a client tool declared in mcpServers, or mcp__<server>__<tool> for a stdio, http or sse server's", field, truncate(rule, 64))
		}
	}
	return out, nil
}

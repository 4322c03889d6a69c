"""The MCP tools by group, each group added to an MCPServer by one function bound to a
Service: planning (plan, inspect_checkpoint), sweeps (start_sweep, sweep_status, list_sweeps;
stop_sweep, resume_sweep; get_report), kernels (tune_kernels, kernels_status). calls.run_tool
turns the service's errors into tool errors. mcp_server.build_server adds them in that order."""

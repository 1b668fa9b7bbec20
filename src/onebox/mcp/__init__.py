"""`onebox mcp`: the Model Context Protocol server (stdio and streamable HTTP); see docs/mcp.md.

    state.py       the runtime, knowledge, tenant and in-process worker of one server
    calls.py       what each tool does, over the same services as the HTTP API and CLI
    server.py      the tools (typed input schemas) and their error translation
    transports.py  stdio and streamable HTTP (API keys, or loopback only)
"""

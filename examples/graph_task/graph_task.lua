-- A graph of tasks on moonflow:
--   moonflow run examples/graph_task/graph_task.lua URL1 URL2
--
--            +--> fetch1 --+
--   timer ---+             +---> report
--            +--> fetch2 --+
--
-- A 1-second timer first; then the two URLs are fetched side by side; the
-- report runs once both are done and prints the size of each page (-1
-- when its fetch failed). mf.graph builds the whole DAG and runs it as one
-- step: the script waits once. Each node's callback keeps what the report
-- needs, as Workflow's graph tutorial hands the sizes over in user data.
-- Exit status: 0, or 2 for a usage error.
local mf = require "moonflow"

local url1, url2 = ...
if select("#", ...) ~= 2 then
    io.stderr:write("usage: moonflow run examples/graph_task/graph_task.lua URL1 URL2\n")
    return 2 -- the main chunk's number is moonflow's exit status
end

local sizes = {}

-- A page's size once its fetch is done (a callback is a plain call: it
-- cannot wait, only look at the result).
local function fetch(n, url)
    return mf.task.http {
        url = url, redirects = 3, timeout = 30000,
        callback = function(res)
            sizes[n] = res.state == "success" and #res.body or -1
        end,
    }
end

local graph = mf.graph({
    timer = mf.task.timer(1000, {
        callback = function() print("timer task complete (1s).") end,
    }),
    fetch1 = { fetch(1, url1), after = "timer" },
    fetch2 = { fetch(2, url2), after = "timer" },
    report = {
        mf.task.lua(function()
            print(("page1 size = %d, page2 size = %d"):format(sizes[1], sizes[2]))
        end),
        after = { "fetch1", "fetch2" },
    },
}, { on_failure = "run" }) -- report even when a fetch failed

graph:wait()
print("graph task complete.")

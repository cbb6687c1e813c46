-- moonflow.trace: `moonflow trace FILE [ID...]` — the traces `moonflow
-- serve` writes (trace = { file = ... }: one OTLP JSON object a line) drawn
-- as text waterfalls, one per request: each span on its line, indented
-- under its parent, with its start and duration from the request's start,
-- its state, and a bar on a common time scale; under an HTTP call, when
-- each of its steps happened after its start.
--
--   trace 5f0c...0001  GET /fanout  200  101.8 ms
--        start      time  span                          0 ms          101.8 ms
--       0.0 ms  101.8 ms  GET /fanout                   |======================|
--       0.2 ms  101.7 ms    parallel  success           |======================|
--       0.2 ms   60.3 ms      http  success             |=============         |
--
-- IDs pick the traces of those request ids (or trace ids); none: all. An
-- id that no trace in FILE has is named on stderr, and the exit status is 1.
local json = require "cjson.safe"

local M = {}

local WIDTH = 40 -- bar columns

-- An HTTP call's span events, as the waterfall names them.
local STEP_NAMES = {
    ["dns.resolved"] = "resolved", ["connection.connected"] = "connected",
    ["tls.handshake_done"] = "tls",
    ["request.start"] = "sending", ["request.sent"] = "sent",
    ["response.first_byte"] = "first byte",
}

local function attr(span, key)
    for _, a in ipairs(span.attributes or {}) do
        if a.key == key then
            local v = a.value or {}
            return v.stringValue or v.intValue
        end
    end
end

-- The spans of one line, or nil and why.
local function spans_of(line)
    local doc, err = json.decode(line)
    if not doc then return nil, "not JSON (" .. tostring(err) .. ")" end
    local out = {}
    for _, rs in ipairs(doc.resourceSpans or {}) do
        for _, ss in ipairs(rs.scopeSpans or {}) do
            for _, s in ipairs(ss.spans or {}) do out[#out + 1] = s end
        end
    end
    if #out == 0 then return nil, "no spans" end
    return out
end

local function ns(s) return tonumber(s) or 0 end

-- Depth-first order from the root (the span without a parent), children
-- by start time.
local function ordered(spans)
    local children, root = {}, nil
    for _, s in ipairs(spans) do
        if s.parentSpanId and s.parentSpanId ~= "" then
            local list = children[s.parentSpanId] or {}
            children[s.parentSpanId] = list
            list[#list + 1] = s
        elseif not root then
            root = s
        end
    end
    local out = {}
    local function walk(s, depth)
        out[#out + 1] = { span = s, depth = depth }
        local list = children[s.spanId] or {}
        table.sort(list, function(a, b)
            return ns(a.startTimeUnixNano) < ns(b.startTimeUnixNano)
        end)
        for _, c in ipairs(list) do walk(c, depth + 1) end
    end
    if root then walk(root, 0) end
    return out, root
end

local function bar(t0, total, s)
    local from = (ns(s.startTimeUnixNano) - t0) / total * WIDTH
    local to = (ns(s.endTimeUnixNano) - t0) / total * WIDTH
    local a = math.max(0, math.min(WIDTH - 1, math.floor(from)))
    local b = math.max(a + 1, math.min(WIDTH, math.ceil(to)))
    return "|" .. (" "):rep(a) .. ("="):rep(b - a) .. (" "):rep(WIDTH - b) .. "|"
end

local function ms(v)
    return (v >= 1e6 and "%.1f ms" or "%.3f ms"):format(v / 1e6)
end

-- The waterfall of one trace as text.
function M.render(spans)
    local rows, root = ordered(spans)
    if not root then return nil, "no root span" end
    local t0 = ns(root.startTimeUnixNano)
    local total = math.max(1, ns(root.endTimeUnixNano) - t0)
    local out = {}
    out[#out + 1] = ("trace %s  %s  %s  %s"):format(
        attr(root, "moonflow.request_id") or root.traceId, root.name,
        attr(root, "http.response.status_code") or "-", ms(total))
    local dropped = attr(root, "moonflow.dropped_spans")
    if dropped then
        out[#out + 1] = ("  (%s spans were not recorded: no memory)"):format(dropped)
    end
    out[#out + 1] = ("  %10s  %9s  %-28s %-12s%s"):format("start", "time", "span",
        "0 ms", (" "):rep(WIDTH - 10) .. ms(total))
    for _, r in ipairs(rows) do
        local s = r.span
        local label = ("  "):rep(r.depth) .. s.name
        local state = r.depth > 0 and attr(s, "moonflow.task.state") or nil
        if state then label = label .. "  " .. state end
        out[#out + 1] = ("  %10s  %9s  %-28s %s"):format(
            ms(ns(s.startTimeUnixNano) - t0),
            ms(ns(s.endTimeUnixNano) - ns(s.startTimeUnixNano)),
            label, bar(t0, total, s))
        local steps = {}
        for _, e in ipairs(s.events or {}) do
            steps[#steps + 1] = ("%s +%s"):format(STEP_NAMES[e.name] or e.name,
                ms(ns(e.timeUnixNano) - ns(s.startTimeUnixNano)))
        end
        if #steps > 0 then
            out[#out + 1] = ("  %10s  %9s  %s%s"):format("", "",
                ("  "):rep(r.depth + 1), table.concat(steps, ", "))
        end
    end
    return table.concat(out, "\n")
end

-- Whether the trace is one asked for (every one when no id was given);
-- the id it matched is marked found.
local function wanted(ids, found, spans)
    if not next(ids) then return true end
    local root = spans[1]
    for _, id in ipairs { attr(root, "moonflow.request_id") or "", root.traceId or "" } do
        if ids[id] then
            found[id] = true
            return true
        end
    end
    return false
end

-- Says on stderr which of the ids asked for no trace in file holds; true
-- when there was one.
local function report_missing(file, args, found)
    local missing = false
    for i = 2, #args do
        if not found[args[i]] then
            io.stderr:write(("moonflow trace: %s: no trace with id %s\n"):format(file, args[i]))
            missing, found[args[i]] = true, true -- once per id
        end
    end
    return missing
end

-- moonflow trace FILE [ID...]: 0, 1 (a line that is no trace, or an id
-- that no trace has), 2 (usage).
function M.main(args)
    local file = args[1]
    if not file or file == "--help" or file == "-h" then
        io.stderr:write("usage: moonflow trace FILE [REQUEST_ID...]\n")
        return file and 0 or 2
    end
    local f, err = io.open(file, "r")
    if not f then
        io.stderr:write("moonflow trace: ", err, "\n")
        return 1
    end
    local ids = {}
    for i = 2, #args do ids[args[i]] = true end
    local found = {}
    local status, n, first = 0, 0, true
    for line in f:lines() do
        n = n + 1
        if line ~= "" then
            local spans, why = spans_of(line)
            if not spans then
                io.stderr:write(("moonflow trace: %s:%d: %s\n"):format(file, n, why))
                status = 1
            elseif wanted(ids, found, spans) then
                local text, why2 = M.render(spans)
                if not text then
                    io.stderr:write(("moonflow trace: %s:%d: %s\n"):format(file, n, why2))
                    status = 1
                else
                    io.write(first and "" or "\n", text, "\n")
                    first = false
                end
            end
        end
    end
    f:close()
    if report_missing(file, args, found) then status = 1 end
    return status
end

return M

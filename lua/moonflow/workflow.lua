-- moonflow.workflow — Sogou Workflow's flow primitives as steps:
-- named counters (mf.task.counter / mf.count), conditionals that wait for
-- a named signal (mf.task.conditional / mf.signal) and resource pools that
-- bound how many steps run at once (mf.resource_pool(n):step(s)). Each is
-- a "lua" step (moonflow.thread's waiter under it), so it composes into
-- series and parallels like any task. Per worker: names are not shared
-- between workers.
local cwait = require "moonflow.wait"

local park, wake, waiter = cwait.park, cwait.wake, cwait.waiter
local type, setmetatable = type, setmetatable
local floor = math.floor
local running = coroutine.running

local M = {}

local raise = require "moonflow.raise"

local function count_arg(n, what)
    if type(n) ~= "number" or n < 1 or n ~= floor(n) then
        raise(what .. ": a count (an integer >= 1) expected")
    end
end

local function name_arg(name, what)
    if type(name) ~= "string" or name == "" then
        raise(what .. ": a name (a non-empty string) expected")
    end
end

-- name -> list of live records, oldest first.
local counters, conditionals = {}, {}

local function list_remove(lists, name, rec)
    local list = lists[name]
    if not list then return end
    for i = 1, #list do
        if list[i] == rec then
            table.remove(list, i)
            break
        end
    end
    if #list == 0 then lists[name] = nil end
end

-- ---- counters ---------------------------------------------------------------

-- mf.task.counter(name, n): a step that ends once mf.count(name) has
-- counted n for it. It counts from its creation (counts made before it runs
-- are kept); a counter that never runs stays registered under its name.
function M.counter(task_lua, name, n)
    name_arg(name, "mf.task.counter(name, n)")
    count_arg(n, "mf.task.counter(name, n)")
    local rec = { remaining = n }
    local list = counters[name] or {}
    counters[name] = list
    list[#list + 1] = rec
    return task_lua(function()
        if rec.remaining > 0 then
            rec.waiter = waiter()
            park(rec.waiter)
        end
        return n
    end)
end

-- mf.count(name [, n]): counts n (default 1) into the counters named name,
-- oldest first (what one does not need goes to the next); returns how many
-- counts landed.
function M.count(name, n)
    name_arg(name, "mf.count(name [, n])")
    n = n or 1
    count_arg(n, "mf.count(name [, n])")
    local landed = 0
    local list = counters[name]
    while n > 0 and list and list[1] do
        local rec = list[1]
        local take = rec.remaining < n and rec.remaining or n
        rec.remaining = rec.remaining - take
        n, landed = n - take, landed + take
        if rec.remaining == 0 then
            table.remove(list, 1)
            if rec.waiter then wake(rec.waiter) end
        end
    end
    if list and #list == 0 then counters[name] = nil end
    return landed
end

-- ---- conditionals -----------------------------------------------------------

-- mf.task.conditional(name): a step that waits until mf.signal(name,
-- value); result.values[1] is the value. Only a running step waits: a
-- signal with nobody waiting is not kept.
function M.conditional(task_lua, name)
    name_arg(name, "mf.task.conditional(name)")
    return task_lua(function()
        local rec = { waiter = waiter() }
        local list = conditionals[name] or {}
        conditionals[name] = list
        list[#list + 1] = rec
        local ok, value = park(rec.waiter)
        list_remove(conditionals, name, rec)
        return value
    end)
end

-- mf.signal(name, value): wakes the conditional named name that has waited
-- longest, with value; true if there was one.
function M.signal(name, value)
    name_arg(name, "mf.signal(name, value)")
    local list = conditionals[name]
    while list and list[1] do
        local rec = table.remove(list, 1)
        if #list == 0 then conditionals[name] = nil end
        if wake(rec.waiter, value) then return true end
    end
    return false
end

-- ---- resource pools ---------------------------------------------------------

local Pool = {}
Pool.__index = Pool

-- mf.resource_pool(n): n units; pool:step(s) is a step that takes a unit
-- (waiting, in arrival order, while none is free), runs s and gives the
-- unit back however it ended (a timeout or a canceled flow included); its
-- result.values[1] is s's result.
function M.resource_pool(semaphore, task_lua, n)
    count_arg(n, "mf.resource_pool(n)")
    return setmetatable({ sem = semaphore(n), task_lua = task_lua,
                          holders = {} }, Pool)
end

function Pool:step(s)
    if type(s) ~= "table" or type(s.wait) ~= "function" then
        raise("pool:step(s): a step (a task, series or parallel) expected")
    end
    local sem, holders = self.sem, self.holders
    return self.task_lua {
        fn = function()
            sem:wait()
            holders[running()] = true
            return s:wait()
        end,
        -- However the step ended (a timeout aborts it mid-wait), the unit
        -- goes back, once, if its run took one.
        finally = function(_, thread)
            if holders[thread] then
                holders[thread] = nil
                sem:post()
            end
        end,
    }
end

-- pool:free(): the units free now.
function Pool:free() return self.sem:count() end

return M

-- moonflow.thread — Lua threads and the primitives that coordinate them:
-- mf.spawn (thread:wait), mf.wait_any, mf.semaphore and mf.queue (a
-- channel between coroutines: Workflow's message queue). All of it on one
-- C primitive, moonflow.wait: a one-shot waiter a coroutine parks on (with
-- a timeout) and anyone wakes (the resume comes on the loop's next turn,
-- never inside the waker). Everything here runs on one worker's loop:
-- these objects are not shared between workers.
local cwait = require "moonflow.wait"

local park, wake, waiter = cwait.park, cwait.wake, cwait.waiter
local select, setmetatable, type, unpack = select, setmetatable, type, unpack
local pairs, getmetatable = pairs, getmetatable
local floor, huge = math.floor, math.huge

local M = {}

-- Raises msg at the caller's line (outside the embedded modules).
local raise = require "moonflow.raise"

local function check_timeout(ms, what)
    if ms ~= nil and (type(ms) ~= "number" or ms < 0 or ms ~= ms) then
        raise(what .. ": a timeout in ms (>= 0) or nil expected")
    end
end

-- A FIFO of waiters; a waiter that timed out stays until it is reached
-- (wake then returns false and the next one is tried).
local function fifo() return { head = 1, tail = 0 } end
local function fifo_push(q, v) q.tail = q.tail + 1; q[q.tail] = v end
local function fifo_pop(q)
    if q.head > q.tail then return nil end
    local v = q[q.head]
    q[q.head] = nil
    q.head = q.head + 1
    return v
end
-- Wakes the first waiter still waiting, with the values given.
local function fifo_wake(q, ...)
    local w = fifo_pop(q)
    while w do
        if wake(w, ...) then return true end
        w = fifo_pop(q)
    end
    return false
end

-- ---- threads --------------------------------------------------------------

local Thread = {}
Thread.__index = Thread

local function pack(...) return { n = select("#", ...), ... } end

-- mf.spawn(fn, ...): runs fn(...) in a coroutine of its own from the loop's
-- next turn; returns its thread. A thread runs to its end whether or not
-- anyone waits for it.
function M.spawn(fn, ...)
    if type(fn) ~= "function" then raise("mf.spawn(fn, ...): a function expected") end
    local t = setmetatable({ waiters = {} }, Thread)
    cwait.spawn(function(...)
        t.result = pack(...)
        local waiters = t.waiters
        t.waiters = nil
        for w in pairs(waiters) do wake(w, t) end
    end, fn, ...)
    return t
end

-- thread:wait([ms]): true and fn's results, or false and its error (with a
-- traceback); nil, "timeout" when ms passed first.
function Thread:wait(ms)
    check_timeout(ms, "thread:wait")
    if not self.result then
        local w = waiter()
        self.waiters[w] = true
        if not park(w, ms) then
            self.waiters[w] = nil
            return nil, "timeout"
        end
    end
    local r = self.result
    return unpack(r, 1, r.n)
end

-- thread:done(): whether it ended.
function Thread:done() return self.result ~= nil end

-- mf.wait_any(t1, t2, ... [, {timeout = ms}]): the first of the threads to
-- end, then its ok and results; nil, "timeout" when ms passed first.
function M.wait_any(...)
    local n, ms = select("#", ...), nil
    local last = select(n, ...)
    if n > 0 and getmetatable(last) ~= Thread and type(last) == "table" then
        ms, n = last.timeout, n - 1
        check_timeout(ms, "mf.wait_any")
    end
    if n == 0 then raise("mf.wait_any(t1, ...): at least one thread expected") end
    local threads = { ... }
    for i = 1, n do
        local t = threads[i]
        if getmetatable(t) ~= Thread then
            raise(("mf.wait_any: argument %d is not a thread"):format(i))
        end
        if t.result then return t, unpack(t.result, 1, t.result.n) end
    end
    local w = waiter()
    for i = 1, n do threads[i].waiters[w] = true end
    local ok, t = park(w, ms)
    for i = 1, n do
        if threads[i].waiters then threads[i].waiters[w] = nil end
    end
    if not ok then return nil, "timeout" end
    return t, unpack(t.result, 1, t.result.n)
end

-- ---- semaphore ------------------------------------------------------------

local Semaphore = {}
Semaphore.__index = Semaphore

-- mf.semaphore([n]): n units (default 0).
function M.semaphore(n)
    n = n or 0
    if type(n) ~= "number" or n < 0 or n ~= floor(n) then
        raise("mf.semaphore(n): a count of units (an integer >= 0) expected")
    end
    return setmetatable({ units = n, queue = fifo() }, Semaphore)
end

-- sem:wait([ms]): takes a unit, waiting (FIFO) while there is none; true,
-- or nil, "timeout".
function Semaphore:wait(ms)
    check_timeout(ms, "sem:wait")
    if self.units > 0 then
        self.units = self.units - 1
        return true
    end
    local w = waiter()
    fifo_push(self.queue, w)
    if park(w, ms) then return true end
    return nil, "timeout"
end

-- sem:post([n]): gives n units (default 1), each to the longest waiter or
-- to the count.
function Semaphore:post(n)
    n = n or 1
    if type(n) ~= "number" or n < 1 or n ~= floor(n) then
        raise("sem:post(n): a count of units (an integer >= 1) expected")
    end
    for _ = 1, n do
        if not fifo_wake(self.queue) then self.units = self.units + 1 end
    end
end

-- sem:count(): the units free now.
function Semaphore:count() return self.units end

-- ---- queue ----------------------------------------------------------------

local Queue = {}
Queue.__index = Queue
local CLOSED = {}

-- mf.queue([capacity]): a FIFO of values between coroutines; push waits
-- while it is full (default: never full).
function M.queue(capacity)
    capacity = capacity or huge
    if type(capacity) ~= "number" or capacity < 1 or
       (capacity ~= huge and capacity ~= floor(capacity)) then
        raise("mf.queue(capacity): an integer >= 1 or nil expected")
    end
    return setmetatable({ items = fifo(), capacity = capacity,
                          poppers = fifo(), pushers = fifo() }, Queue)
end

local function length(q) return q.items.tail - q.items.head + 1 end

-- q:push(v [, ms]): true; nil, "closed" once closed; nil, "timeout" when
-- it stayed full for ms. v may be anything but nil.
function Queue:push(v, ms)
    if v == nil then raise("q:push(v): a value expected (nil cannot be queued)") end
    check_timeout(ms, "q:push")
    while true do
        if self.closed then return nil, "closed" end
        if fifo_wake(self.poppers, v) then return true end
        if length(self) < self.capacity then
            fifo_push(self.items, v)
            return true
        end
        local w = waiter()
        fifo_push(self.pushers, w)
        if not park(w, ms) then return nil, "timeout" end
    end
end

-- q:pop([ms]): the oldest value; nil, "closed" once closed and empty; nil,
-- "timeout" when nothing came for ms.
function Queue:pop(ms)
    check_timeout(ms, "q:pop")
    if length(self) > 0 then
        local v = fifo_pop(self.items)
        fifo_wake(self.pushers) -- room for one more
        return v
    end
    if self.closed then return nil, "closed" end
    local w = waiter()
    fifo_push(self.poppers, w)
    local ok, v = park(w, ms)
    if not ok then return nil, "timeout" end
    if v == CLOSED then return nil, "closed" end
    return v
end

-- q:close(): no more pushes; waiting pops get nil, "closed" (values
-- already queued are still popped); waiting pushes get nil, "closed".
function Queue:close()
    self.closed = true
    while fifo_wake(self.poppers, CLOSED) do end
    while fifo_wake(self.pushers) do end
end

function Queue:len() return length(self) end

return M

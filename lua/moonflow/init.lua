-- moonflow — the Lua API (require "moonflow"). Thin: descriptions are plain
-- tables checked and run by the C side (moonflow.core/flow/timer/go); this
-- file names things and turns task results into (value) / (nil, err).
local core = require "moonflow.core"
local cflow = require "moonflow.flow"
local ctimer = require "moonflow.timer"

local select, setmetatable, getmetatable = select, setmetatable, getmetatable
local type, error, pairs, unpack = type, error, pairs, unpack

local mf = { _VERSION = "0.1.0" }

-- A flow step (task, series or parallel) knows how to wait for itself.
local Step = {}
Step.__index = Step

-- Runs the whole flow in C; yields once; returns the results table.
function Step:wait()
  local res, err = cflow.wait(self)
  if err then error(err, 2) end
  return res
end

local function step(kind, fields)
  fields.kind = kind
  return setmetatable(fields, Step)
end

local function copy_opts(opts, into)
  if opts ~= nil and type(opts) ~= "table" then
    error("options must be a table", 3)
  end
  for k, v in pairs(opts or {}) do into[k] = v end
  return into
end

local function list(kind, steps)
  if type(steps) ~= "table" then
    error("mf." .. kind .. " expects a list of steps", 3)
  end
  local s = {}
  for i = 1, #steps do
    if getmetatable(steps[i]) ~= Step then
      error(("mf.%s: step %d is not a task, series or parallel"):format(
        kind, i), 3)
    end
    s[i] = steps[i]
  end
  return step(kind, s)
end

mf.sleep = core.sleep
mf.now = core.now

function mf.series(steps) return list("series", steps) end
function mf.parallel(steps) return list("parallel", steps) end

mf.task = {}

function mf.task.timer(ms, opts)
  if type(ms) ~= "number" then error("mf.task.timer(ms): number expected", 2) end
  return step("timer", copy_opts(opts, { ms = ms }))
end

function mf.task.http(req)
  if type(req) ~= "table" or type(req.url) ~= "string" then
    error("mf.task.http{url = ...}: url expected", 2)
  end
  local fields = copy_opts(req, {})
  if not fields.method then fields.method = fields.body and "POST" or "GET" end
  return step("http", fields)
end

-- mf.task.go(name, ...) or mf.task.go{name = , args = {...}, timeout = }.
function mf.task.go(name, ...)
  if type(name) == "table" then
    local fields = copy_opts(name, {})
    local args = fields.args or {}
    fields.args = { n = #args, unpack(args) }
    return step("go", fields)
  end
  return step("go", { name = name, args = { n = select("#", ...), ... } })
end

-- A result table of a failed task becomes nil, err.
local function value_of(r)
  if r.state ~= "success" then return nil, r.error end
  return r
end

mf.http = {}

function mf.http.request(req)
  local r, err = value_of(mf.task.http(req):wait())
  if not r then return nil, err end
  r.state, r.kind = nil, nil
  return r
end

function mf.http.get(url, opts)
  return mf.http.request(copy_opts(opts, { url = url, method = "GET" }))
end

function mf.http.post(url, body, opts)
  return mf.http.request(copy_opts(opts,
    { url = url, method = "POST", body = body }))
end

function mf.go(name, ...)
  local r, err = value_of(mf.task.go(name, ...):wait())
  if not r then return nil, err end
  return r.value
end

mf.timer = { at = ctimer.at, every = ctimer.every }

local ok, cjson = pcall(require, "cjson.safe")
if ok then
  local strict = require "cjson"
  mf.json = {
    encode = strict.encode,
    decode = cjson.decode,
    null = strict.null,
  }
else
  mf.json = setmetatable({}, { __index = function()
    error("mf.json needs lua-cjson (cjson.so on package.cpath)", 2)
  end })
end

mf.debug = { counts = core.counts }

return mf

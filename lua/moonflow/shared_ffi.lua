-- moonflow.shared_ffi — get, set and incr of shared dicts as FFI calls of
-- the C dict (moonflow/shdict.h), which LuaJIT's compiler turns into
-- direct calls inside a compiled loop, where a method of moonflow.shared
-- (a Lua C function) ends the trace. Only where the compiler is on (a
-- `moonflow serve` worker (unless jit = false), `moonflow run`, `moonflow
-- test`) and the binary exports the dict's symbols; elsewhere, and for
-- every call these fast paths do not take (a number key, a TTL on incr,
-- anything to raise about), the C methods answer: the results and the
-- errors are theirs. Returns moonflow.shared.
local cshared = require "moonflow.shared"

local ok_ffi, ffi = pcall(require, "ffi")
if not ok_ffi or not jit or not jit.status() then return cshared end

ffi.cdef [[
typedef struct mf_shdict mf_shdict_t;
typedef struct mf_shdict_value {
    int type; bool boolean; double number; const char *str; size_t len;
} mf_shdict_value_t;
typedef struct mf_shdict_buf { char *data; size_t cap; } mf_shdict_buf_t;
const char *mf_shdict_strerror(int rc);
void mf_shdict_buf_free(mf_shdict_buf_t *buf);
int mf_shdict_get(mf_shdict_t *d, const char *key, size_t klen, bool stale_ok,
                  mf_shdict_value_t *out, uint32_t *flags, bool *stale,
                  mf_shdict_buf_t *buf);
int mf_shdict_store(mf_shdict_t *d, const char *key, size_t klen,
                    const mf_shdict_value_t *v, uint64_t ttl_ms,
                    uint32_t flags, unsigned mode, bool *forcible);
int mf_shdict_incr(mf_shdict_t *d, const char *key, size_t klen, double by,
                   const double *init, uint64_t init_ttl_ms, double *out,
                   bool *forcible);
]]
local C = ffi.C
if not pcall(function() return C.mf_shdict_get, C.mf_shdict_store,
        C.mf_shdict_incr end) then
    return cshared -- a program that does not export them
end

local type, getmetatable, tonumber, ceil = type, getmetatable, tonumber, math.ceil
local ffi_string, ffi_cast = ffi.string, ffi.cast
local M = cshared.methods
local cget, cset, cincr = M.get, M.set, M.incr
cshared.c_methods = { get = cget, set = cset, incr = cincr } -- (specs)
local MT = "shared dict" -- the __metatable of a dict object
local NOT_FOUND, STRING, NUMBER, BOOLEAN = -1, 3, 2, 1
local MAX_KEY = 65535

-- One of each per state: the dict copies a string out into buf (grown by
-- the C side, freed with the state).
local val = ffi.new("mf_shdict_value_t[1]")
local flags_out = ffi.new("uint32_t[1]")
local num = ffi.new("double[1]")
local init_in = ffi.new("double[1]")
local forcible = ffi.new("bool[1]")
local buf = ffi.gc(ffi.new("mf_shdict_buf_t[1]"), C.mf_shdict_buf_free)

-- The C dict of a dict object (its userdata holds the pointer).
local function dict_of(self)
    return ffi_cast("mf_shdict_t **", self)[0]
end

local function words(rc)
    return ffi_string(C.mf_shdict_strerror(rc))
end

-- A string key the C dict takes as it is, on a dict object.
local function plain(self, key)
    if getmetatable(self) ~= MT or type(self) ~= "userdata"
        or type(key) ~= "string" then
        return false
    end
    local n = #key
    return n > 0 and n <= MAX_KEY
end

function M.get(self, key)
    if not plain(self, key) then return cget(self, key) end
    local rc = C.mf_shdict_get(dict_of(self), key, #key, false, val,
                               flags_out, nil, buf)
    if rc ~= 0 then
        if rc == NOT_FOUND then return nil end
        return nil, words(rc)
    end
    local v, value = val[0], nil
    local t = v.type
    if t == STRING then
        value = ffi_string(v.str, v.len)
    elseif t == NUMBER then
        value = tonumber(v.number)
    elseif t == BOOLEAN then
        value = v.boolean
    end
    local f = flags_out[0]
    if f ~= 0 then return value, tonumber(f) end
    return value
end

-- exptime and flags as the C method takes them without a word.
local function plain_options(exptime, flags)
    if exptime ~= nil and not (type(exptime) == "number" and exptime >= 0
            and exptime < 1e12) then
        return false
    end
    return flags == nil or (type(flags) == "number" and flags >= 0
        and flags <= 4294967295 and flags % 1 == 0)
end

function M.set(self, key, value, exptime, flags)
    if not plain(self, key) or not plain_options(exptime, flags) then
        return cset(self, key, value, exptime, flags)
    end
    local v, tv = val[0], type(value)
    if tv == "string" then
        v.type, v.str, v.len = STRING, value, #value
    elseif tv == "number" then
        v.type, v.number = NUMBER, value
    elseif tv == "boolean" then
        v.type, v.boolean = BOOLEAN, value
    elseif tv == "nil" then
        v.type = 0
    else
        return cset(self, key, value, exptime, flags)
    end
    local rc = C.mf_shdict_store(dict_of(self), key, #key, val,
                                 exptime and ceil(exptime * 1000) or 0,
                                 flags or 0, 0, forcible)
    v.str = nil -- the Lua string is not held past the call
    if rc == 0 then return true, nil, forcible[0] end
    return false, words(rc), forcible[0]
end

function M.incr(self, key, value, init, init_ttl)
    if not plain(self, key) or type(value) ~= "number" or init_ttl ~= nil
        or (init ~= nil and type(init) ~= "number") then
        return cincr(self, key, value, init, init_ttl)
    end
    local rc
    if init == nil then
        rc = C.mf_shdict_incr(dict_of(self), key, #key, value, nil, 0, num,
                              forcible)
    else
        init_in[0] = init
        rc = C.mf_shdict_incr(dict_of(self), key, #key, value, init_in, 0,
                              num, forcible)
    end
    if rc ~= 0 then return nil, words(rc) end
    if init == nil then return num[0] end
    return num[0], nil, forcible[0]
end

return cshared

-- ffi.cdef and ffi.metatype run again, as a hot reload runs a module's top
-- level again in the same Lua state (moonflow.ffi_guard, which every
-- host state starts with). The changes it logs go to stderr
-- (spec/integration/test_ffi_reload.py checks those lines).
local ffi = require "ffi"
local sizeof, ffi_C = ffi.sizeof, ffi.C

describe("ffi.cdef run again", function()
    local state_ffi = ffi
    -- what ffi.cdef and ffi.metatype are in every state (busted's own
    -- wrappers stand in front of them here)
    local ffi = require "moonflow.ffi_guard"

    it("is what the state's ffi.cdef and ffi.metatype call", function()
        local function beneath_busted(f) -- its wrapper's "original"
            for i = 1, 20 do
                local name, value = debug.getupvalue(f, i)
                if not name then break end
                if name == "original" then return value end
            end
            return f
        end
        assert.equals(ffi.cdef, beneath_busted(state_ffi.cdef))
        assert.equals(ffi.metatype, beneath_busted(state_ffi.metatype))
    end)

    it("skips a declaration seen before, spelled the same", function()
        ffi.cdef [[
            typedef struct { int a; } spec_guard_same_t;
            int spec_guard_fn(int x);
        ]]
        ffi.cdef [[
            /* the same, spaced otherwise */
            typedef struct {int a;}   spec_guard_same_t;
            int spec_guard_fn( int x );
        ]]
        assert.equals(4, sizeof("spec_guard_same_t"))
    end)

    it("keeps the first of a changed declaration and applies the new ones", function()
        ffi.cdef "typedef struct { int a; } spec_guard_changed_t;"
        ffi.cdef [[
            typedef struct { double a, b; } spec_guard_changed_t;
            typedef struct { char c; } spec_guard_new_t;
        ]]
        assert.equals(4, sizeof("spec_guard_changed_t"))
        assert.equals(1, sizeof("spec_guard_new_t"))
        -- LuaJIT keeps a first typedef or function silently: tracked here
        ffi.cdef "typedef int spec_guard_int_t; int abs(int x);"
        ffi.cdef "typedef char spec_guard_int_t; long abs(long x);"
        assert.equals(4, sizeof("spec_guard_int_t"))
        assert.equals(7, ffi_C.abs(-7))
        -- a changed enum keeps its first constants
        ffi.cdef "enum spec_guard_colour { SPEC_RED = 1, SPEC_GREEN };"
        ffi.cdef "enum spec_guard_colour { SPEC_RED = 5, SPEC_GREEN };"
        assert.equals(1, ffi_C.SPEC_RED)
        -- a function pointer, an array and a forward declaration
        ffi.cdef "typedef int (*spec_guard_cb_t)(int); extern int spec_guard_arr[4]; struct spec_guard_fwd;"
        ffi.cdef "typedef int (*spec_guard_cb_t)(int); extern int spec_guard_arr[4]; struct spec_guard_fwd;"
        ffi.cdef "struct spec_guard_fwd { int a; };"
        assert.equals(4, sizeof("struct spec_guard_fwd"))
    end)

    it("still raises a syntax error, with its line in the text", function()
        local ok, err = pcall(ffi.cdef, "typedef int spec_guard_ok_t;\n\nint int spec_bad;")
        assert.is_false(ok)
        assert.matches("at line 3", err)
        assert.equals(4, sizeof("spec_guard_ok_t"))
    end)

    it("applies a block with #pragma pack whole, once", function()
        local text = [[
#pragma pack(push, 1)
typedef struct { char c; int i; } spec_guard_packed_t;
#pragma pack(pop)
]]
        ffi.cdef(text)
        ffi.cdef(text)
        assert.equals(5, sizeof("spec_guard_packed_t"))
    end)

    it("lets a new metatable of the same fields refresh the methods", function()
        ffi.cdef "typedef struct { int v; } spec_guard_obj_t;"
        local function load(answer)
            return ffi.metatype("spec_guard_obj_t", {
                __index = { answer = function() return answer end },
                __tostring = function() return answer end,
            })
        end
        local first = load("first")
        local obj = first(1)
        assert.equals("first", obj:answer())
        local again = load("second") -- no "cannot change a protected metatable"
        assert.equals(first, again)
        assert.equals("second", obj:answer())
        assert.equals("first", tostring(obj)) -- only __index may change
        ffi.metatype("spec_guard_obj_t", {}) -- other fields: logged, ignored
        assert.equals("second", obj:answer())
    end)
end)

-- /sub_filters: a route with phases whose filters mark what they saw, the
-- same whether it is requested or captured (capture_spec.lua): the content
-- writes its phase in two pieces, the header filter sets X-Phase, the body
-- filter appends its phase (and eof) to each piece.
local ngx = require "moonflow.ngx"

return {
    content = function(_, resp)
        resp:write(ngx.get_phase() .. "|")
        resp:write("b|")
    end,
    header_filter = function(_, resp) resp.headers["X-Phase"] = ngx.get_phase() end,
    body_filter = function(_, _, chunk, eof)
        return chunk .. "[" .. ngx.get_phase() .. (eof and ",eof" or "") .. "]"
    end,
}

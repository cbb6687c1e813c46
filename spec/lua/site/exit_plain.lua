-- /exit_plain?case=status|ok: ngx.exit in a plain handler: 204 answers
-- and ends it; ngx.OK ends it with what it set (phases_spec.lua).
local ngx = require "moonflow.ngx"

return function(req, resp)
    if req.query.case == "ok" then
        resp.status = 201
        resp:set_header("X-Set", "before")
        ngx.exit(ngx.OK)
    else
        ngx.exit(404)
    end
    error("not reached: ngx.exit ends the handler")
end

-- req:form() (serve_spec.lua): answers the form as JSON, or 400 with the
-- reason; /form?max=N limits the fields.
return function(req, resp)
    local form, err = req:form(tonumber(req.query.max))
    if not form then return resp:json({ error = err }, 400) end
    resp:json(form)
end

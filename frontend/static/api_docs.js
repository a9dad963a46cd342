// /docs: Swagger UI from the service's own files (the CSP allows no inline script and no other site).
"use strict";
const docs = document.getElementById("swagger-ui");
window.ui = SwaggerUIBundle({ url: docs.dataset.openapiUrl, dom_id: "#swagger-ui", deepLinking: true, layout: "BaseLayout" });

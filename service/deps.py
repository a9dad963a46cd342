"""Dependencies as Annotated aliases: routes name what they need, lifespan built it."""

from typing import Annotated

from fastapi import Depends, Request
from fastapi.templating import Jinja2Templates

from service.answering import Answering
from service.prompting import Prompts
from service.services import Services
from service.store import Store


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_store(services: ServicesDep) -> Store:
    return services.store


def get_prompts(services: ServicesDep) -> Prompts:
    return services.prompts


def get_answering(services: ServicesDep) -> Answering:
    return services.answering


StoreDep = Annotated[Store, Depends(get_store)]
PromptsDep = Annotated[Prompts, Depends(get_prompts)]
AnsweringDep = Annotated[Answering, Depends(get_answering)]


def get_templates(request: Request) -> Jinja2Templates:
    templates: Jinja2Templates = request.app.state.templates
    return templates


TemplatesDep = Annotated[Jinja2Templates, Depends(get_templates)]

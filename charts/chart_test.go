// Package charts tests the Helm chart of charts/sluice: it renders the
// chart with the real `helm template` and decodes every object it renders
// strictly into the Kubernetes API types (k8s.io/api), which needs no
// cluster: a misspelt field or a wrong type fails. It is a module of its
// own, so that the Kubernetes types stay out of Sluice's.
package charts

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/policy"
)

// helm returns the helm binary: on PATH, or where `go install` puts it
// (test.sh installs a pinned version there).
func helm(t *testing.T) string {
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	out, _ := exec.Command("go", "env", "GOPATH").Output()
	p := filepath.Join(strings.TrimSpace(string(out)), "bin", "helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatal("helm is not installed: ./test.sh installs it (go install helm.sh/helm/v3/cmd/helm)")
	}
	return p
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the chart writes (its CRD's Go types are a module of their own).
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is what one `helm template` rendered, by kind.
type rendered struct {
	deployments []appsv1.Deployment
	services    []corev1.Service
	configMaps  []corev1.ConfigMap
	secrets     []corev1.Secret
	hpas        []autoscalingv2.HorizontalPodAutoscaler
	pdbs        []policyv1.PodDisruptionBudget
	monitors    []serviceMonitor
}

// strict decodes a YAML object into v, refusing unknown fields.
func strict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func render(t *testing.T, args ...string) rendered {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "rel", "./sluice", "--namespace", "rl"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	var r rendered
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		var err error
		switch head.APIVersion + " " + head.Kind {
		case " ":
			continue // a comment-only document
		case "apps/v1 Deployment":
			r.deployments = append(r.deployments, appsv1.Deployment{})
			err = strict([]byte(doc), &r.deployments[len(r.deployments)-1])
		case "v1 Service":
			r.services = append(r.services, corev1.Service{})
			err = strict([]byte(doc), &r.services[len(r.services)-1])
		case "v1 ConfigMap":
			r.configMaps = append(r.configMaps, corev1.ConfigMap{})
			err = strict([]byte(doc), &r.configMaps[len(r.configMaps)-1])
		case "v1 Secret":
			r.secrets = append(r.secrets, corev1.Secret{})
			err = strict([]byte(doc), &r.secrets[len(r.secrets)-1])
		case "autoscaling/v2 HorizontalPodAutoscaler":
			r.hpas = append(r.hpas, autoscalingv2.HorizontalPodAutoscaler{})
			err = strict([]byte(doc), &r.hpas[len(r.hpas)-1])
		case "policy/v1 PodDisruptionBudget":
			r.pdbs = append(r.pdbs, policyv1.PodDisruptionBudget{})
			err = strict([]byte(doc), &r.pdbs[len(r.pdbs)-1])
		case "monitoring.coreos.com/v1 ServiceMonitor":
			r.monitors = append(r.monitors, serviceMonitor{})
			err = strict([]byte(doc), &r.monitors[len(r.monitors)-1])
		default:
			t.Fatalf("the chart renders a %s %s, which the test does not know", head.APIVersion, head.Kind)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", head.Kind, err, doc)
		}
	}
	return r
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// TestChart renders the chart for its defaults, for a shared Redis with
// a ServiceMonitor and an admin token, and for a Redis Cluster behind a
// Secret with a fixed replica count, and checks each rendered object.
func TestChart(t *testing.T) {
	values := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(values, []byte(`
store:
  existingSecret: sluice-redis
  existingSecretKey: cluster-url
autoscaling: {enabled: false}
replicaCount: 3
preStopSleepSeconds: 3
policy: |
  schema:
    tenant:
      children:
        "*":
          limits: {algorithm: fixed_window, limit: 1000, window: 1h}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"redis", []string{"--set", "store.url=redis://redis:6379/0", "--set", "serviceMonitor.enabled=true",
			"--set", "admin.existingSecret=sluice-admin", "--set-json", `extraEnv=[{"name":"SLUICE_LOG_FORMAT","value":"json"}]`}},
		{"cluster", []string{"-f", values}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.args...)
			if len(r.deployments) != 1 || len(r.services) != 1 || len(r.configMaps) != 1 || len(r.pdbs) != 1 {
				t.Fatalf("rendered %d deployments, %d services, %d config maps, %d PDBs; want one each",
					len(r.deployments), len(r.services), len(r.configMaps), len(r.pdbs))
			}
			d := r.deployments[0]
			pod := d.Spec.Template.Spec
			c := pod.Containers[0]

			// Probes, shutdown, a non-root, read-only container.
			if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Errorf("probes %s and %s", c.LivenessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path)
			}
			if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot || *pod.SecurityContext.RunAsUser != 65532 ||
				!*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation {
				t.Errorf("security contexts %+v %+v", pod.SecurityContext, c.SecurityContext)
			}
			if e := env(c, "SLUICE_SHUTDOWN_DELAY"); e == nil || e.Value != "5s" || *pod.TerminationGracePeriodSeconds < 15 {
				t.Errorf("shutdown delay %v, grace %d", e, *pod.TerminationGracePeriodSeconds)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v", c.Resources)
			}

			// The policy: the ConfigMap's limits.yaml, mounted where --policy
			// says, and a policy Sluice loads.
			cm := r.configMaps[0]
			if pod.Volumes[0].ConfigMap.Name != cm.Name || c.VolumeMounts[0].MountPath+"/limits.yaml" != c.Args[1] {
				t.Errorf("policy %s mounted at %s, served from %s", cm.Name, c.VolumeMounts[0].MountPath, c.Args)
			}
			if _, err := policy.Parse("limits.yaml", []byte(cm.Data["limits.yaml"])); err != nil {
				t.Errorf("the chart's policy: %v", err)
			}

			// The store URL from a Secret: the chart's, or the user's.
			ref := env(c, "SLUICE_STORE").ValueFrom.SecretKeyRef
			switch tc.name {
			case "cluster":
				if ref.Name != "sluice-redis" || ref.Key != "cluster-url" || len(r.secrets) != 0 {
					t.Errorf("the store's secret %s/%s, %d secrets rendered", ref.Name, ref.Key, len(r.secrets))
				}
			default:
				want := map[string]string{"defaults": "memory", "redis": "redis://redis:6379/0"}[tc.name]
				if len(r.secrets) != 1 || ref.Name != r.secrets[0].Name || r.secrets[0].StringData[ref.Key] != want {
					t.Errorf("the store's secret %s/%s, rendered %+v", ref.Name, ref.Key, r.secrets)
				}
			}

			// Services, autoscaling, disruption budget, monitor.
			s := r.services[0]
			if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "grpc" && p.Port == 8081 }) ||
				!slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" && p.Port == 8080 }) {
				t.Errorf("service ports %+v", s.Spec.Ports)
			}
			for k, v := range s.Spec.Selector {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("the service selects %s=%s, which the pods lack", k, v)
				}
			}
			if tc.name == "cluster" {
				if len(r.hpas) != 0 || *d.Spec.Replicas != 3 || c.Lifecycle.PreStop.Sleep.Seconds != 3 {
					t.Errorf("cluster: %d HPAs, replicas %v, preStop %+v", len(r.hpas), d.Spec.Replicas, c.Lifecycle)
				}
			} else if len(r.hpas) != 1 || r.hpas[0].Spec.ScaleTargetRef.Name != d.Name || d.Spec.Replicas != nil {
				t.Errorf("%d HPAs for %s (replicas %v)", len(r.hpas), d.Name, d.Spec.Replicas)
			}
			if r.pdbs[0].Spec.MinAvailable.IntValue() != 1 {
				t.Errorf("PDB %+v", r.pdbs[0].Spec)
			}
			if tc.name == "redis" {
				if len(r.monitors) != 1 || r.monitors[0].Spec.Endpoints[0].Path != "/metrics" {
					t.Errorf("monitors %+v", r.monitors)
				}
				if e := env(c, "SLUICE_ADMIN_TOKEN"); e == nil || e.ValueFrom.SecretKeyRef.Name != "sluice-admin" {
					t.Errorf("admin token %+v", e)
				}
				if e := env(c, "SLUICE_LOG_FORMAT"); e == nil || e.Value != "json" {
					t.Errorf("extraEnv: %+v", c.Env)
				}
			} else if len(r.monitors) != 0 {
				t.Errorf("%d monitors rendered, want none", len(r.monitors))
			}
		})
	}
}

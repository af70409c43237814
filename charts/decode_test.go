package charts

import (
	"bytes"
	stdjson "encoding/json"
	"fmt"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	securityv1beta1 "istio.io/api/security/v1beta1"
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"
)

// decoder decodes Kubernetes and prometheus-operator objects strictly:
// unknown and duplicate fields are errors.
type decoder struct{ s *json.Serializer }

func newDecoder(t testing.TB) decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme, monitoringv1.AddToScheme,
		admissionregistrationv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return decoder{json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Yaml: true, Strict: true})}
}

// istioSpecs maps the Istio kinds the chart renders to their API message.
var istioSpecs = map[string]struct {
	apiVersion string
	spec       func() proto.Message
}{
	"AuthorizationPolicy": {"security.istio.io/v1", func() proto.Message { return &securityv1beta1.AuthorizationPolicy{} }},
	"EnvoyFilter":         {"networking.istio.io/v1alpha3", func() proto.Message { return &networkingv1alpha3.EnvoyFilter{} }},
	"Telemetry":           {"telemetry.istio.io/v1", func() proto.Message { return &telemetryv1alpha1.Telemetry{} }},
}

// decode returns the typed object of m: a Kubernetes runtime.Object, or
// for Istio kinds the spec's proto message. Any field the type does not
// have is an error.
func (d decoder) decode(m manifest) (any, error) {
	if is, ok := istioSpecs[m.Kind]; ok {
		return decodeIstio(m, is.apiVersion, is.spec())
	}
	obj, _, err := d.s.Decode(m.Raw, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// decodeIstio checks the envelope (apiVersion, kind, metadata) strictly and
// the spec with protojson, which refuses unknown fields.
func decodeIstio(m manifest, apiVersion string, spec proto.Message) (any, error) {
	var obj struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Spec       map[string]any    `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(m.Raw, &obj); err != nil {
		return nil, err
	}
	if obj.APIVersion != apiVersion {
		return nil, fmt.Errorf("apiVersion %q, want %q", obj.APIVersion, apiVersion)
	}
	raw, err := stdjsonMarshal(obj.Spec)
	if err != nil {
		return nil, err
	}
	if err := protojson.Unmarshal(raw, spec); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return spec, nil
}

// clusterScoped are the kinds the chart renders without a namespace.
var clusterScoped = map[string]bool{"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}

// Every manifest of every values file decodes strictly into its type.
func TestRenderedManifestsDecodeStrictly(t *testing.T) {
	d := newDecoder(t)
	for _, f := range valuesFiles(t) {
		t.Run(valuesName(f), func(t *testing.T) {
			kinds := map[string]int{}
			for _, m := range render(t, f) {
				kinds[m.Kind]++
				obj, err := d.decode(m)
				if err != nil {
					t.Errorf("%s: %v", m, err)
					continue
				}
				if o, ok := obj.(metav1.Object); ok && o.GetNamespace() == "" && !clusterScoped[m.Kind] {
					t.Errorf("%s: no namespace", m)
				}
			}
			for _, k := range []string{"ConfigMap", "Deployment", "Service"} {
				if kinds[k] == 0 {
					t.Errorf("no %s rendered", k)
				}
			}
		})
	}
}

// The decoder is strict: a misspelt field fails (the test above can fail).
func TestDecoderIsStrict(t *testing.T) {
	d := newDecoder(t)
	bad := []manifest{
		{Kind: "Service", Raw: []byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {prots: []}\n")},
		{Kind: "Deployment", Raw: []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: 1, replicas: 2}\n")},
		{Kind: "ServiceMonitor", Raw: []byte("apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {endpoint: []}\n")},
		{Kind: "AuthorizationPolicy", Raw: []byte("apiVersion: security.istio.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: x}\nspec: {actions: CUSTOM}\n")},
		{Kind: "EnvoyFilter", Raw: []byte("apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: x, nmespace: y}\nspec: {}\n")},
	}
	for _, m := range bad {
		if _, err := d.decode(m); err == nil {
			t.Errorf("%s decoded without error:\n%s", m.Kind, m.Raw)
		}
	}
}

func stdjsonMarshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := stdjson.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return b.Bytes(), err
}
